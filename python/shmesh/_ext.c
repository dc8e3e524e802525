/* shmesh._ext: the compiled module that makes every collective call of the
 * Python binding, through the library's one entry for every mesh op
 * (shmesh_op_call) with the result's dtype and shape asked from it
 * (shmesh_op_result): no op's signature or shape rule is restated here or
 * in the package.
 *
 * A Collective is a callable that stands for one of the package's public
 * collectives (shmesh.psum, all_gather, psum_scatter, all_to_all, ...).
 * (An _async form's callable does the same and dispatches the call with a
 * new Token, returning the package's Pending.)  Its call takes the common
 * case whole, in C: one C-contiguous
 * native-order numpy array of a dtype shmesh has, an axis name that is one
 * plain str, axis_index_groups as plain lists of ints or none, one device
 * per rank, the context's own
 * thread, a live mesh (or none: the entered one), and the op's other
 * arguments as plain ints and bools.  It asks the result's shape (a
 * reduction's dtype once per input dtype: its shape is the input's),
 * allocates it (PyArray_Empty), calls the library with the GIL released,
 * and raises through the package's own error function.  Anything else
 * goes, unchanged, to the package's Python function for the op (`slow`),
 * which converts pytrees, tensors and views, resolves groups, several axes
 * and several devices per rank, and makes each array's call through
 * result() and call() below (_collectives._leaf), blocking or _async.
 *
 * token_wait, token_test and wait_tokens are the library's, for the
 * package's Tokens.
 *
 * The library's functions come as addresses from the package's ctypes
 * handle (bind), so this module links nothing of libshmesh: one library,
 * however it was found (docs/python.md).  The package's state the fast
 * path needs (a live context, its owner thread, the devices per rank) is
 * what shmesh._context last published through state(), which it calls
 * wherever that state changes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <structmember.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include "shmesh.h"

#if PY_VERSION_HEX < 0x030a0000 /* Python 3.10's */
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#endif

typedef int (*op_call_fn)(const shmesh_op_args *, shmesh_token *);
typedef int (*op_result_fn)(const shmesh_op_args *, shmesh_array *);
typedef shmesh_mesh *(*mesh_current_fn)(void);
typedef uint64_t (*mesh_hash_fn)(const shmesh_mesh *);
typedef int (*token_fn)(shmesh_token);
typedef int (*wait_all_fn)(int, const shmesh_token[]);
typedef int (*wait_any_fn)(int, const shmesh_token[], int *);

/* The library's one entry for every mesh op and its result's shape
 * (shmesh_op_call, shmesh_op_result: lib/include/shmesh.h), given once by
 * the package (bind). */
static op_call_fn op_call;
static op_result_fn op_result;
static mesh_current_fn mesh_current;
static mesh_hash_fn mesh_hash;
static token_fn token_wait, token_test;
static wait_all_fn token_wait_all;
static wait_any_fn token_wait_any;

/* The op's shape of call: a reduction (psum ...: the input's shape, the
 * dtype the library says), all_gather (axis=, tiled=), psum_scatter
 * (scatter_dimension=, tiled=), all_to_all (split_axis, concat_axis
 * positional, tiled=), and with a third positional argument: pswapaxes
 * (axis), ppermute (perm: pairs), pshuffle (perm: one index per group
 * member), pbroadcast (source). */
enum kind { REDUCE, ALL_GATHER, PSUM_SCATTER, ALL_TO_ALL, PSWAPAXES, PPERMUTE, PSHUFFLE,
            PBROADCAST, NKINDS };

/* The most pairs (ppermute) or entries (pshuffle) a call takes here. */
#define PERM_MAX 1024
/* The most devices per rank a call takes here. */
#define LOCAL_MAX 1024

/* Keywords a Collective's fast path accepts (others go to `slow`). */
enum { KW_GROUPS = 1, KW_BUCKET = 2 };

/* The longest axes text whose result a Collective keeps. */
#define LAST_AXES 64

/* The result the library gave a Collective's last call that asked: it
 * holds for a call of the same mesh (by address and value: shmesh_mesh_hash
 * covers its names, sizes and devices), axes, input dtype and shape, and
 * axis arguments; a permutation or source does not change the shape, and
 * the call checks them itself. */
struct last {
    bool valid;
    const shmesh_mesh *mesh;
    uint64_t mesh_hash;
    char axes[LAST_AXES];
    int code, ndim, axis, axis2;
    bool tiled;
    int64_t shape[SHMESH_MAX_NDIM];
    shmesh_array res; /* its data NULL */
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int code;        /* the op's code in the library's table */
    int kind;
    int kws;         /* KW_*: keywords the op has besides mesh */
    signed char dtype_of[SHMESH_DTYPE_COUNT]; /* a reduction's result dtype by input dtype,
                                                 asked once (-1: not yet) */
    struct last last; /* the others' */
    PyObject *slow;  /* the package's function for the op */
    PyObject *raise_on; /* the package's _raise_on(rc, mesh pointer) */
    PyObject *mesh_type; /* shmesh.Mesh: a mesh argument must be one, not a look-alike */
    /* An _async form's: token_new() a new Token (its _a the address of its
     * shmesh_token), finish(token, in, out) its Pending, the work
     * registered; NULL for a blocking form. */
    PyObject *token_new, *finish;
    PyObject *name, *qualname, *doc, *module, *dict;
} Collective;

static PyObject *s_addr, *s_p, *s_mesh, *s_groups, *s_bucket,
    *s_axis, *s_tiled, *s_scatter_dimension, *s_out, *s_a;

/* numpy's type of each shmesh dtype (bfloat16: none here, -1). */
static const int npy_of[SHMESH_DTYPE_COUNT] = {
    [SHMESH_BOOL] = NPY_BOOL,       [SHMESH_INT8] = NPY_INT8,     [SHMESH_INT16] = NPY_INT16,
    [SHMESH_INT32] = NPY_INT32,     [SHMESH_INT64] = NPY_INT64,   [SHMESH_UINT8] = NPY_UINT8,
    [SHMESH_UINT16] = NPY_UINT16,   [SHMESH_UINT32] = NPY_UINT32, [SHMESH_UINT64] = NPY_UINT64,
    [SHMESH_FLOAT16] = NPY_HALF,    [SHMESH_BFLOAT16] = -1,       [SHMESH_FLOAT32] = NPY_FLOAT32,
    [SHMESH_FLOAT64] = NPY_FLOAT64,
};

/* shmesh's dtype for a numpy dtype it has, or -1 (bfloat16 and others:
 * the Python path's). */
static int code_of(const PyArray_Descr *d)
{
    static const int ints[] = {-1, SHMESH_INT8, SHMESH_INT16, -1, SHMESH_INT32,
                               -1, -1, -1, SHMESH_INT64};
    static const int uints[] = {-1, SHMESH_UINT8, SHMESH_UINT16, -1, SHMESH_UINT32,
                                -1, -1, -1, SHMESH_UINT64};
    int n = (int)d->elsize;
    if (n < 1 || n > 8 || d->type_num >= NPY_NTYPES) /* user types: ml_dtypes' bfloat16 */
        return -1;
    switch (d->kind) {
    case 'b': return n == 1 ? SHMESH_BOOL : -1;
    case 'i': return ints[n];
    case 'u': return uints[n];
    case 'f': return n == 2 ? SHMESH_FLOAT16 : n == 4 ? SHMESH_FLOAT32 : n == 8 ? SHMESH_FLOAT64 : -1;
    default: return -1;
    }
}

/* Whether s is one axis name the library reads as it is: not empty, and no
 * NUL, ',', '(', ')' or whitespace (non-ASCII text: the Python path's
 * check). */
static const char *plain_name(PyObject *s)
{
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s))
        return NULL;
    Py_ssize_t n;
    const char *t = PyUnicode_AsUTF8AndSize(s, &n);
    if (!t || n == 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        if (ch <= ' ' || ch == ',' || ch == '(' || ch == ')' || ch == 0x7f)
            return NULL;
    }
    return t;
}

/* The package's state the fast path needs (shmesh._context publishes it
 * through state() wherever it changes): a live context, the ident of the
 * thread that owns it, the devices per rank. */
static struct {
    bool live;
    unsigned long owner;
    long local;
} pkg;

/* Whether this call is the package's: a context, this thread its owner,
 * one device per rank (read in a few ns: the package's module dict, which
 * this once read at each call, cost 33 ns of a 270 ns psum). */
static inline int context_ready(void)
{
    return pkg.live && pkg.local == 1 && pkg.owner == PyThread_get_thread_ident();
}

static PyObject *slow_path(Collective *o, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(o->slow, args, nargsf, kwnames);
}

/* A keyword's name is k (interned names compare by pointer first). */
static int is_kw(PyObject *k, PyObject *name)
{
    return k == name || PyUnicode_Compare(k, name) == 0;
}

/* An exact int in C int range into *out: 0, or -1 (the Python path's). */
static int int_arg(PyObject *v, int *out)
{
    if (!PyLong_CheckExact(v))
        return -1;
    long a = PyLong_AsLong(v);
    if ((a == -1 && PyErr_Occurred()) || a < INT_MIN || a > INT_MAX) {
        PyErr_Clear();
        return -1;
    }
    *out = (int)a;
    return 0;
}

/* A list or tuple of at most `max` entries (each `width` ints: 1, or a
 * pair as a list or tuple of 2) into ints: their count, or -1. */
static int int_list(PyObject *v, int width, int *ints, Py_ssize_t max)
{
    if (!PyList_CheckExact(v) && !PyTuple_CheckExact(v))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    if (n > max)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(v, i);
        if (width == 1) {
            if (int_arg(e, ints + i))
                return -1;
            continue;
        }
        if ((!PyList_CheckExact(e) && !PyTuple_CheckExact(e)) || PySequence_Fast_GET_SIZE(e) != 2 ||
            int_arg(PySequence_Fast_GET_ITEM(e, 0), ints + 2 * i) ||
            int_arg(PySequence_Fast_GET_ITEM(e, 1), ints + 2 * i + 1))
            return -1;
    }
    return (int)n;
}

/* The most axis_index_groups entries (and groups) a call's lists give here;
 * more: the package builds the struct (groups as an address). */
#define GROUPS_MAX 1024

struct groups_buf {
    shmesh_groups g;
    int idx[GROUPS_MAX], sizes[GROUPS_MAX];
};

/* axis_index_groups as a list (or tuple) of lists (or tuples) of exact ints,
 * in b; NULL for anything else (nothing raised: the package's to check). */
static const shmesh_groups *groups_of(PyObject *v, struct groups_buf *b)
{
    if (!PyList_CheckExact(v) && !PyTuple_CheckExact(v))
        return NULL;
    Py_ssize_t ng = PySequence_Fast_GET_SIZE(v), at = 0;
    if (ng > GROUPS_MAX)
        return NULL;
    for (Py_ssize_t g = 0; g < ng; g++) {
        PyObject *grp = PySequence_Fast_GET_ITEM(v, g);
        if (!PyList_CheckExact(grp) && !PyTuple_CheckExact(grp))
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(grp);
        if (at + n > GROUPS_MAX)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++)
            if (int_arg(PySequence_Fast_GET_ITEM(grp, i), b->idx + at + i))
                return NULL;
        b->sizes[g] = (int)n;
        at += n;
    }
    b->g = (shmesh_groups){.ngroups = (int)ng, .group_size = ng ? b->sizes[0] : 0,
                           .indices = b->idx, .group_sizes = b->sizes};
    return &b->g;
}

/* shmesh_op_result with the GIL released (the library may wait for the
 * context's lock). */
static int ask(const shmesh_op_args *op, shmesh_array *res)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = op_result(op, res);
    Py_END_ALLOW_THREADS
    return rc;
}

/* One device's shmesh_array of numpy array a (its data, dtype `code`,
 * shape), with k devices per rank the k arrays along its leading axis into
 * d[0..k-1] (the package's _shape_of checked that axis). */
static void describe(PyArrayObject *a, int code, int k, shmesh_array *d)
{
    int nd = PyArray_NDIM(a) - (k > 1);
    const npy_intp *dims = PyArray_DIMS(a) + (k > 1);
    char *data = PyArray_DATA(a);
    size_t step = k > 1 ? (size_t)PyArray_NBYTES(a) / (size_t)k : 0;
    for (int l = 0; l < k; l++) {
        d[l] = (shmesh_array){.data = data + step * (size_t)l, .dtype = (shmesh_dtype)code,
                              .ndim = nd};
        for (int i = 0; i < nd; i++)
            d[l].shape[i] = dims[i];
    }
}

/* The error of a failed library call, raised as the package does:
 * _raise_on(rc, the mesh's pointer object or None). */
static PyObject *raise_rc(PyObject *raise_on, int rc, PyObject *mesh_p)
{
    PyObject *r = PyObject_CallFunction(raise_on, "iO", rc, mesh_p ? mesh_p : Py_None);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "shmesh: error %d was not raised", rc);
    return NULL;
}

static PyObject *collective_call(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    Collective *o = (Collective *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != (o->kind == ALL_TO_ALL ? 4 : o->kind >= PSWAPAXES ? 3 : 2))
        return slow_path(o, args, nargsf, kwnames);
    PyObject *mesh = Py_None, *axis_v = NULL, *tiled_v = Py_False, *into = NULL,
             *groups_v = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (is_kw(k, s_mesh))
            mesh = v;
        else if (is_kw(k, s_out) && !o->finish)
            into = v == Py_None ? NULL : v;
        else if ((o->kws & KW_GROUPS) && is_kw(k, s_groups)) {
            groups_v = v == Py_None ? NULL : v;
        } else if ((o->kws & KW_BUCKET) && is_kw(k, s_bucket)) {
            /* one array: no buckets */
        } else if (o->kind >= ALL_GATHER && o->kind <= ALL_TO_ALL && is_kw(k, s_tiled)) {
            tiled_v = v;
        } else if ((o->kind == ALL_GATHER && is_kw(k, s_axis)) ||
                   (o->kind == PSUM_SCATTER && is_kw(k, s_scatter_dimension))) {
            axis_v = v;
        } else {
            return slow_path(o, args, nargsf, kwnames);
        }
    }
    PyObject *x = args[0];
    const char *axes = plain_name(args[1]);
    if (!axes || !PyArray_CheckExact(x) || (tiled_v != Py_True && tiled_v != Py_False) ||
        !context_ready())
        goto slow;
    PyArrayObject *a = (PyArrayObject *)x;
    int ndim = PyArray_NDIM(a), code = code_of(PyArray_DESCR(a));
    if (code < 0 || ndim > SHMESH_MAX_NDIM || !PyArray_IS_C_CONTIGUOUS(a) ||
        !PyArray_ISNOTSWAPPED(a))
        goto slow;
    shmesh_mesh *mp = NULL;
    if (mesh != Py_None) {
        if ((PyObject *)Py_TYPE(mesh) != o->mesh_type)
            goto slow;
        PyObject *addr = PyObject_GetAttr(mesh, s_addr);
        if (!addr) {
            PyErr_Clear();
            goto slow;
        }
        mp = PyLong_CheckExact(addr) ? PyLong_AsVoidPtr(addr) : NULL;
        Py_DECREF(addr);
        if (!mp) { /* not a Mesh, or a destroyed one: the Python path says so */
            PyErr_Clear();
            goto slow;
        }
    }
    shmesh_array in, res = {.data = NULL};
    describe(a, code, 1, &in);
    int perm[2 * PERM_MAX];
    shmesh_op_args op = {.op = o->code, .mesh = mp, .axes = axes, .in = &in,
                         .tiled = tiled_v == Py_True};
    struct groups_buf gb;
    if (groups_v && !(op.groups = groups_of(groups_v, &gb)))
        goto slow;
    switch (o->kind) {
    case ALL_GATHER:
    case PSUM_SCATTER:
        if (axis_v && int_arg(axis_v, &op.axis))
            goto slow;
        break;
    case ALL_TO_ALL:
        if (int_arg(args[2], &op.axis) || int_arg(args[3], &op.axis2))
            goto slow;
        break;
    case PSWAPAXES:
        if (int_arg(args[2], &op.axis))
            goto slow;
        break;
    case PBROADCAST:
        if (int_arg(args[2], &op.source))
            goto slow;
        break;
    case PPERMUTE:
    case PSHUFFLE:
        if ((op.nperm = int_list(args[2], o->kind == PPERMUTE ? 2 : 1, perm, PERM_MAX)) < 0)
            goto slow;
        op.perm = perm;
        break;
    default:
        break;
    }
    /* The result's dtype and shape, as the library says: a reduction's is
     * the input's shape and a dtype asked once per input dtype, the
     * others' asked at each call (shmesh_op_result).  A refusal is the
     * Python path's to raise, naming the op. */
    int rc = 0;
    struct last *l = &o->last;
    const shmesh_mesh *km = NULL;
    uint64_t kh = 0;
    if (o->kind == REDUCE && o->dtype_of[code] >= 0) {
        res.dtype = (shmesh_dtype)o->dtype_of[code];
        res.ndim = ndim;
        memcpy(res.shape, in.shape, sizeof *in.shape * (size_t)ndim);
    } else if (o->kind != REDUCE && !op.groups && l->valid &&
               (km = mp ? mp : mesh_current()) == l->mesh &&
               km && (kh = mesh_hash(km)) == l->mesh_hash && l->code == code &&
               l->ndim == ndim && l->axis == op.axis && l->axis2 == op.axis2 &&
               l->tiled == op.tiled &&
               !memcmp(l->shape, in.shape, sizeof *in.shape * (size_t)ndim) &&
               !strcmp(l->axes, axes)) {
        res = l->res;
    } else {
        if ((rc = ask(&op, &res)))
            goto slow;
        if (o->kind == REDUCE) {
            o->dtype_of[code] = (signed char)res.dtype;
        } else if (!op.groups && strlen(axes) < LAST_AXES && (km = mp ? mp : mesh_current())) {
            *l = (struct last){.valid = true, .mesh = km, .mesh_hash = mesh_hash(km),
                               .code = code, .ndim = ndim, .axis = op.axis, .axis2 = op.axis2,
                               .tiled = op.tiled, .res = res};
            memcpy(l->shape, in.shape, sizeof *in.shape * (size_t)ndim);
            strcpy(l->axes, axes);
        }
    }
    int t = npy_of[res.dtype];
    if (t < 0)
        goto slow;
    npy_intp shape[SHMESH_MAX_NDIM];
    for (int d = 0; d < res.ndim; d++)
        shape[d] = (npy_intp)res.shape[d];
    /* The input's own descriptor where the dtype is the same (most calls):
     * a reference taken, not a lookup. */
    PyArray_Descr *rd = (int)res.dtype == code ? PyArray_DESCR(a) : PyArray_DescrFromType(t);
    if (!rd)
        return NULL;
    if ((int)res.dtype == code)
        Py_INCREF(rd);
    PyObject *out;
    if (into) { /* out=: exactly the result's array, else the Python path says why */
        PyArrayObject *o_ = (PyArrayObject *)into;
        bool fits = PyArray_CheckExact(into) && PyArray_NDIM(o_) == res.ndim &&
                    PyArray_IS_C_CONTIGUOUS(o_) && PyArray_ISWRITEABLE(o_) &&
                    PyArray_ISNOTSWAPPED(o_) && PyArray_EquivTypes(PyArray_DESCR(o_), rd);
        for (int d = 0; fits && d < res.ndim; d++)
            fits = PyArray_DIMS(o_)[d] == shape[d];
        Py_DECREF(rd);
        if (!fits)
            goto slow;
        out = Py_NewRef(into);
    } else if (!(out = PyArray_Empty(res.ndim, shape, rd, 0))) { /* steals rd */
        return NULL;
    }
    res.data = PyArray_DATA((PyArrayObject *)out);
    op.out = &res;
    PyObject *tok = NULL;
    shmesh_token *tp = NULL;
    if (o->finish) { /* the _async form: a Token for the library to write */
        PyObject *addr = NULL;
        if (!(tok = PyObject_CallNoArgs(o->token_new)) || !(addr = PyObject_GetAttr(tok, s_a)) ||
            !(tp = PyLong_AsVoidPtr(addr))) {
            Py_XDECREF(addr);
            Py_XDECREF(tok);
            Py_DECREF(out);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "shmesh._ext: a Token without its address");
            return NULL;
        }
        Py_DECREF(addr);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = op_call(&op, tp);
    Py_END_ALLOW_THREADS
    if (!rc && !tok)
        return out;
    if (!rc) { /* the Pending of the work dispatched */
        PyObject *r = PyObject_CallFunctionObjArgs(o->finish, tok, x, out, NULL);
        Py_DECREF(tok);
        Py_DECREF(out);
        return r;
    }
    Py_XDECREF(tok); /* refused: nothing dispatched */
    Py_DECREF(out);
    PyObject *mesh_p = mesh == Py_None ? NULL : PyObject_GetAttr(mesh, s_p);
    if (mesh != Py_None && !mesh_p)
        return NULL;
    raise_rc(o->raise_on, rc, mesh_p);
    Py_XDECREF(mesh_p);
    return NULL;
slow:
    if (PyErr_Occurred())
        return NULL;
    return slow_path(o, args, nargsf, kwnames);
}

/* Collective(code, kind, kws, slow, raise_on, mesh_type[, token_new,
 * finish]): code the op's in the library's table, mesh_type the class Mesh
 * (given: the package's modules each hold their own names); token_new and
 * finish make it the op's _async form.  bind() first. */
static PyObject *collective_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    int code, kind, kws;
    PyObject *slow, *raise_on, *mesh_type, *token_new = NULL, *finish = NULL;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Collective takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "iiiOOO!|OO", &code, &kind, &kws, &slow, &raise_on,
                          &PyType_Type, &mesh_type, &token_new, &finish))
        return NULL;
    if (!op_call || code <= 0 || kind < REDUCE || kind >= NKINDS || !PyCallable_Check(slow) ||
        !PyCallable_Check(raise_on) || (token_new && (!finish || !PyCallable_Check(token_new) ||
                                                      !PyCallable_Check(finish)))) {
        PyErr_SetString(PyExc_ValueError,
                        "Collective: bind() first; then an op code, a kind (0..7), keywords, "
                        "two callables and the Mesh class");
        return NULL;
    }
    Collective *o = (Collective *)type->tp_alloc(type, 0);
    if (!o)
        return NULL;
    o->vectorcall = collective_call;
    o->code = code;
    o->kind = kind;
    o->kws = kws;
    memset(o->dtype_of, -1, sizeof o->dtype_of);
    Py_INCREF(slow);
    Py_INCREF(raise_on);
    Py_INCREF(mesh_type);
    o->slow = slow;
    o->raise_on = raise_on;
    o->mesh_type = mesh_type;
    o->token_new = token_new ? Py_NewRef(token_new) : NULL;
    o->finish = finish ? Py_NewRef(finish) : NULL;
    o->name = PyObject_GetAttrString(slow, "__name__");
    o->qualname = PyObject_GetAttrString(slow, "__qualname__");
    o->doc = PyObject_GetAttrString(slow, "__doc__");
    o->module = PyObject_GetAttrString(slow, "__module__");
    if (!o->name || !o->qualname || !o->doc || !o->module) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static int collective_traverse(Collective *o, visitproc visit, void *arg)
{
    Py_VISIT(o->slow);
    Py_VISIT(o->raise_on);
    Py_VISIT(o->mesh_type);
    Py_VISIT(o->token_new);
    Py_VISIT(o->finish);
    Py_VISIT(o->dict);
    return 0;
}

static int collective_clear(Collective *o)
{
    Py_CLEAR(o->slow);
    Py_CLEAR(o->raise_on);
    Py_CLEAR(o->mesh_type);
    Py_CLEAR(o->token_new);
    Py_CLEAR(o->finish);
    Py_CLEAR(o->name);
    Py_CLEAR(o->qualname);
    Py_CLEAR(o->doc);
    Py_CLEAR(o->module);
    Py_CLEAR(o->dict);
    return 0;
}

static void collective_dealloc(Collective *o)
{
    PyObject_GC_UnTrack(o);
    collective_clear(o);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *collective_repr(Collective *o)
{
    return PyUnicode_FromFormat("<shmesh function %U>", o->name);
}

static PyMemberDef collective_members[] = {
    {"__name__", T_OBJECT, offsetof(Collective, name), 0, NULL},
    {"__qualname__", T_OBJECT, offsetof(Collective, qualname), 0, NULL},
    {"__doc__", T_OBJECT, offsetof(Collective, doc), 0, NULL},
    {"__module__", T_OBJECT, offsetof(Collective, module), 0, NULL},
    {"__wrapped__", T_OBJECT, offsetof(Collective, slow), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CollectiveType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmesh._ext.Collective",
    .tp_basicsize = sizeof(Collective),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "One of shmesh's collectives, its common case in C (shmesh/_ext.c).",
    .tp_new = collective_new,
    .tp_dealloc = (destructor)collective_dealloc,
    .tp_traverse = (traverseproc)collective_traverse,
    .tp_clear = (inquiry)collective_clear,
    .tp_repr = (reprfunc)collective_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Collective, vectorcall),
    .tp_members = collective_members,
    .tp_dictoffset = offsetof(Collective, dict),
};

/* ---- every call the fast path does not take: the package's leaf calls ---- */

/* A numpy array of `code`, shmesh's dtype the package's table gives its
 * dtype (-1: the array's own, as code_of reads it), C-contiguous in native
 * order (the package's _prepare made it so), with k > 1 its leading axis k
 * entries. */
static int array_arg(PyObject *v, int code, const char *what, int k, shmesh_array *d)
{
    PyArrayObject *a = (PyArrayObject *)v;
    if (!PyArray_Check(v) || !PyArray_IS_C_CONTIGUOUS(a) ||
        (code < 0 && (code = code_of(PyArray_DESCR(a))) < 0) || code >= SHMESH_DTYPE_COUNT ||
        PyArray_NDIM(a) - (k > 1) > SHMESH_MAX_NDIM ||
        (k > 1 && (PyArray_NDIM(a) == 0 || PyArray_DIMS(a)[0] != k))) {
        PyErr_Format(PyExc_TypeError, "shmesh._ext: %s must be a prepared numpy array (%d "
                     "devices per rank), got %R", what, k, v);
        return -1;
    }
    describe(a, code, k, d);
    return 0;
}

/* The arguments result() and call() share: (code, mesh address, axes,
 * groups address, axis, axis2, tiled, source, perm, nperm, in, in's dtype
 * code, k), perm None or a list of ints (ppermute's pairs flattened), into
 * p->op, its in arrays (k of them) in p->descs. */
struct parsed {
    shmesh_op_args op;
    int k;
    int perm[2 * PERM_MAX];
    struct groups_buf groups; /* from lists, when the package passed them */
    shmesh_array *descs; /* 6 * k: in, out, 4 offsets' */
    shmesh_array one[6];
};

/* GROUPS_UNREAD: parse_common's where the axis_index_groups lists are not
 * plain lists of ints; call() and result() then return None, and the
 * package checks them (its sentences) and passes their struct's address
 * instead. */
#define GROUPS_UNREAD (-1000)

/* An int argument (the package passes ints): *out, or -1 with the error set. */
static int int_of(PyObject *v, int *out)
{
    if (!int_arg(v, out))
        return 0;
    PyErr_Format(PyExc_TypeError, "shmesh._ext: expected an int in C int range, got %R", v);
    return -1;
}

static int parse_common(PyObject *const *args, struct parsed *p)
{
    int k, in_code;
    PyObject *perm = args[8];
    shmesh_op_args *op = &p->op;
    *op = (shmesh_op_args){.op = 0};
    p->descs = NULL;
    if (int_of(args[0], &op->op) || int_of(args[4], &op->axis) || int_of(args[5], &op->axis2) ||
        int_of(args[7], &op->source) || int_of(args[9], &op->nperm) ||
        int_of(args[11], &in_code) || int_of(args[12], &k))
        return -1;
    op->mesh = PyLong_AsVoidPtr(args[1]);
    if (PyLong_Check(args[3]))
        op->groups = PyLong_AsVoidPtr(args[3]);
    else if (args[3] != Py_None && !(op->groups = groups_of(args[3], &p->groups)))
        return GROUPS_UNREAD;
    op->axes = PyBytes_AsString(args[2]);
    int tiled = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || tiled < 0)
        return -1;
    op->tiled = tiled;
    if (k < 1 || k > LOCAL_MAX) {
        PyErr_Format(PyExc_ValueError, "shmesh._ext: %d devices per rank", k);
        return -1;
    }
    if (perm != Py_None) { /* (ppermute's pairs flattened) */
        if (int_list(perm, 1, p->perm, 2 * PERM_MAX) < 0) {
            PyErr_Format(PyExc_ValueError, "shmesh._ext: perm must be a list of at most %d ints "
                         "in C int range, got %R", 2 * PERM_MAX, perm);
            return -1;
        }
        op->perm = p->perm;
    }
    p->k = k;
    p->descs = k == 1 ? p->one : PyMem_Calloc(6 * (size_t)k, sizeof *p->descs);
    if (!p->descs) {
        PyErr_NoMemory();
        return -1;
    }
    op->in = p->descs;
    return array_arg(args[10], in_code, "in", k, p->descs);
}

static void parsed_free(struct parsed *p)
{
    if (p->descs != p->one)
        PyMem_Free(p->descs);
    p->descs = NULL;
}

/* (shape, dtype code) of res. */
static PyObject *shape_code(const shmesh_array *res)
{
    PyObject *shape = PyTuple_New(res->ndim);
    if (!shape)
        return NULL;
    for (int d = 0; d < res->ndim; d++)
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(res->shape[d]));
    return Py_BuildValue("Ni", shape, (int)res->dtype);
}

/* result(code, mesh, axes, groups, axis, axis2, tiled, source, perm, nperm,
 * in, in_code, k): (shape, dtype code) of one device's result
 * (shmesh_op_result), or the library's error code (an int) for the
 * package to raise; groups 0 (none), a shmesh_groups' address, or
 * axis_index_groups as lists (None returned where they are not plain
 * lists of ints). */
static PyObject *ext_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "result() takes 13 arguments");
        return NULL;
    }
    struct parsed p;
    int rc = parse_common(args, &p);
    if (rc) {
        parsed_free(&p);
        if (rc == GROUPS_UNREAD)
            Py_RETURN_NONE;
        return NULL;
    }
    shmesh_array res = {.data = NULL};
    rc = ask(&p.op, &res);
    parsed_free(&p);
    return rc ? PyLong_FromLong(rc) : shape_code(&res);
}

/* call(code, mesh, axes, groups, axis, axis2, tiled, source, perm, nperm,
 * in, in_code, k, out, out_code, token, offsets): the op's call
 * (shmesh_op_call) with the GIL released, into out (ragged_all_to_all: the
 * output; offsets its four integer arrays, else None); token 0 for the
 * blocking call, else the address of the shmesh_token its _async form
 * writes.  The library's code: 0, or the error for the package to raise.
 * With out None, the result is asked (shmesh_op_result) and made here (k
 * devices' arrays along a leading axis), and returned, or the error code;
 * a result numpy has no dtype for (bfloat16) is (shape, dtype code) for
 * the package to make and call again with. */
static PyObject *ext_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 17) {
        PyErr_SetString(PyExc_TypeError, "call() takes 17 arguments");
        return NULL;
    }
    struct parsed p;
    unsigned long long token;
    int out_code, rc;
    PyObject *made = NULL;
    if ((rc = parse_common(args, &p)) == GROUPS_UNREAD) {
        parsed_free(&p);
        Py_RETURN_NONE;
    }
    if (rc || int_of(args[14], &out_code))
        goto fail;
    token = PyLong_AsUnsignedLongLong(args[15]);
    if (PyErr_Occurred())
        goto fail;
    if (args[13] == Py_None) {
        shmesh_array res = {.data = NULL};
        if ((rc = ask(&p.op, &res)) || npy_of[res.dtype] < 0) {
            parsed_free(&p);
            return rc ? PyLong_FromLong(rc) : shape_code(&res);
        }
        npy_intp shape[SHMESH_MAX_NDIM + 1];
        int nd = 0;
        if (p.k > 1)
            shape[nd++] = p.k;
        for (int d = 0; d < res.ndim; d++)
            shape[nd++] = (npy_intp)res.shape[d];
        if (!(made = PyArray_Empty(nd, shape, PyArray_DescrFromType(npy_of[res.dtype]), 0)))
            goto fail;
        out_code = res.dtype;
    }
    if (array_arg(made ? made : args[13], out_code, "out", p.k, p.descs + p.k))
        goto fail;
    p.op.out = p.descs + p.k;
    PyObject *offsets = args[16];
    if (offsets != Py_None) {
        if (!PyTuple_CheckExact(offsets) || PyTuple_GET_SIZE(offsets) != 4) {
            PyErr_SetString(PyExc_TypeError, "shmesh._ext: offsets must be a tuple of 4 arrays");
            goto fail;
        }
        for (int w = 0; w < 4; w++) {
            shmesh_array *d = p.descs + (2 + w) * p.k;
            if (array_arg(PyTuple_GET_ITEM(offsets, w), -1, "an offsets array", p.k, d))
                goto fail;
            p.op.offsets[w] = d;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    rc = op_call(&p.op, token ? (shmesh_token *)(uintptr_t)token : NULL);
    Py_END_ALLOW_THREADS
    parsed_free(&p);
    if (made && !rc)
        return made;
    Py_XDECREF(made);
    return PyLong_FromLong(rc);
fail:
    Py_XDECREF(made);
    if (p.descs)
        parsed_free(&p);
    return NULL;
}

/* token_wait(address of a shmesh_token), token_test(the same): the
 * library's shmesh_token_wait (the GIL released) and shmesh_token_test on
 * the Token's struct (its ctypes field _t, which the package keeps). */
static PyObject *token_call(PyObject *arg, token_fn fn, bool release)
{
    const shmesh_token *t = PyLong_AsVoidPtr(arg);
    if (!t) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "shmesh._ext: a token's address");
        return NULL;
    }
    shmesh_token tok = *t;
    int rc;
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        rc = fn(tok);
        Py_END_ALLOW_THREADS
    } else {
        rc = fn(tok);
    }
    return PyLong_FromLong(rc);
}

static PyObject *ext_token_wait(PyObject *self, PyObject *arg)
{
    (void)self;
    return token_call(arg, token_wait, true);
}

static PyObject *ext_token_test(PyObject *self, PyObject *arg)
{
    (void)self;
    return token_call(arg, token_test, false); /* it never blocks */
}

/* state(live, owner, local): the package's state for the fast path (see
 * pkg): whether a context is live, its owner thread's ident (0: none yet),
 * the devices per rank. */
static PyObject *ext_state(PyObject *self, PyObject *args)
{
    (void)self;
    int live;
    unsigned long owner;
    long local;
    if (!PyArg_ParseTuple(args, "pkl", &live, &owner, &local))
        return NULL;
    pkg.live = live;
    pkg.owner = owner;
    pkg.local = local;
    Py_RETURN_NONE;
}

/* wait_tokens(addresses, any): the library's shmesh_token_wait_all over the
 * tokens at those addresses (a list of ints; any false), its code; or its
 * shmesh_token_wait_any (any true), (code, index).  The GIL released. */
static PyObject *ext_wait_tokens(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addrs;
    int any;
    if (!PyArg_ParseTuple(args, "O!p", &PyList_Type, &addrs, &any))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(addrs);
    if (n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "shmesh._ext: too many tokens");
        return NULL;
    }
    shmesh_token few[64], *t = n <= 64 ? few : PyMem_Malloc(sizeof *t * (size_t)n);
    if (!t)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        const shmesh_token *p = PyLong_AsVoidPtr(PyList_GET_ITEM(addrs, i));
        if (!p) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "shmesh._ext: a token's address");
            if (t != few)
                PyMem_Free(t);
            return NULL;
        }
        t[i] = *p;
    }
    int rc, index = -1;
    Py_BEGIN_ALLOW_THREADS
    rc = any ? token_wait_any((int)n, t, &index) : token_wait_all((int)n, t);
    Py_END_ALLOW_THREADS
    if (t != few)
        PyMem_Free(t);
    return any ? Py_BuildValue("ii", rc, index) : PyLong_FromLong(rc);
}

/* bind(shmesh_op_call, shmesh_op_result, shmesh_mesh_current,
 * shmesh_mesh_hash, shmesh_token_wait, shmesh_token_test,
 * shmesh_token_wait_all, shmesh_token_wait_any: their addresses): the
 * library this module calls, the package's (found through ctypes: one
 * library). */
static PyObject *ext_bind(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long a[8];
    if (!PyArg_ParseTuple(args, "KKKKKKKK", a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7))
        return NULL;
    for (int i = 0; i < 8; i++)
        if (!a[i]) {
            PyErr_SetString(PyExc_ValueError, "bind: eight function addresses");
            return NULL;
        }
    op_call = (op_call_fn)(uintptr_t)a[0];
    op_result = (op_result_fn)(uintptr_t)a[1];
    mesh_current = (mesh_current_fn)(uintptr_t)a[2];
    mesh_hash = (mesh_hash_fn)(uintptr_t)a[3];
    token_wait = (token_fn)(uintptr_t)a[4];
    token_test = (token_fn)(uintptr_t)a[5];
    token_wait_all = (wait_all_fn)(uintptr_t)a[6];
    token_wait_any = (wait_any_fn)(uintptr_t)a[7];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", ext_bind, METH_VARARGS,
     "bind(op_call, op_result, mesh_current, mesh_hash, token_wait, token_test, "
     "token_wait_all, token_wait_any): the library's functions' addresses"},
    {"wait_tokens", ext_wait_tokens, METH_VARARGS,
     "wait_tokens(addresses, any): wait_all's code, or wait_any's (code, index)"},
    {"state", ext_state, METH_VARARGS,
     "state(live, owner, local): the package's context, owner thread and devices per rank"},
    {"token_wait", ext_token_wait, METH_O, "token_wait(address of a shmesh_token): its code"},
    {"token_test", ext_token_test, METH_O, "token_test(address of a shmesh_token): its code"},
    {"result", (PyCFunction)(void (*)(void))ext_result, METH_FASTCALL,
     "result(code, mesh, axes, groups, axis, axis2, tiled, source, perm, nperm, in, in_code, k)"},
    {"call", (PyCFunction)(void (*)(void))ext_call, METH_FASTCALL,
     "call(code, mesh, axes, groups, axis, axis2, tiled, source, perm, nperm, in, in_code, k, "
     "out, out_code, token, offsets)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shmesh._ext",
    "The compiled per-call path of shmesh's Python binding (see _ext.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__ext(void);
PyMODINIT_FUNC PyInit__ext(void)
{
    import_array();
    if (PyType_Ready(&CollectiveType) < 0)
        return NULL;
    s_addr = PyUnicode_InternFromString("_addr");
    s_p = PyUnicode_InternFromString("_p");
    s_mesh = PyUnicode_InternFromString("mesh");
    s_groups = PyUnicode_InternFromString("axis_index_groups");
    s_bucket = PyUnicode_InternFromString("bucket_bytes");
    s_axis = PyUnicode_InternFromString("axis");
    s_tiled = PyUnicode_InternFromString("tiled");
    s_scatter_dimension = PyUnicode_InternFromString("scatter_dimension");
    s_out = PyUnicode_InternFromString("out");
    s_a = PyUnicode_InternFromString("_a");
    if (!s_addr || !s_p || !s_mesh || !s_groups || !s_bucket ||
        !s_axis || !s_tiled || !s_scatter_dimension || !s_out || !s_a)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&CollectiveType);
    if (PyModule_AddObject(m, "Collective", (PyObject *)&CollectiveType) < 0) {
        Py_DECREF(&CollectiveType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
