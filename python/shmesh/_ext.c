/* shmesh._ext: the compiled per-call path of the Python binding.
 *
 * A Collective is a callable that stands for one of the package's public
 * collectives (shmesh.psum, all_gather, psum_scatter, all_to_all, ...).
 * Its call takes the common case itself, in C: one C-contiguous
 * native-order numpy array of a dtype shmesh has, an axis name that is one
 * plain str, no axis_index_groups, one device per rank, the context's own
 * thread, a live mesh (or none: the entered one), and the op's other
 * arguments as plain ints and bools in range.  It works out the result's
 * shape as the package does (the group size from shmesh_axis_size),
 * allocates it (PyArray_Empty), calls the library's function with the GIL
 * released (as ctypes did), and raises through the package's own error
 * function.  Anything else goes, unchanged, to the
 * package's Python function for the op (`slow`), which accepts, converts
 * or refuses it exactly as before: the C path only ever does what the
 * Python one would, faster.
 *
 * The library's functions come as addresses from the package's ctypes
 * handle (_lib.raw), so this module links nothing of libshmesh: one
 * library, however it was found (docs/python.md).  The package's state
 * (_ctx, _owner, _local_devices) is read at each call from the dict of
 * the module that holds it (shmesh._context), so nothing here needs to be
 * told when it changes. */
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

typedef int (*reduce_fn)(shmesh_mesh *, const char *, const shmesh_groups *, const shmesh_array *,
                         shmesh_array *);
typedef int (*gather_fn)(shmesh_mesh *, const char *, const shmesh_groups *, int, bool,
                         const shmesh_array *, shmesh_array *);
typedef int (*all_to_all_fn)(shmesh_mesh *, const char *, const shmesh_groups *, int, int, bool,
                             const shmesh_array *, shmesh_array *);
typedef int (*axis_size_fn)(const shmesh_mesh *, const char *, int *);
typedef int (*swap_fn)(shmesh_mesh *, const char *, const shmesh_groups *, int,
                       const shmesh_array *, shmesh_array *);
typedef int (*ppermute_fn)(shmesh_mesh *, const char *, const int (*)[2], int, const shmesh_array *,
                           shmesh_array *);
typedef int (*pshuffle_fn)(shmesh_mesh *, const char *, const int *, const shmesh_array *,
                           shmesh_array *);
typedef int (*pbroadcast_fn)(shmesh_mesh *, const char *, int, const shmesh_array *,
                             shmesh_array *);

/* How a reduction's result dtype follows its input's (the package's
 * _same_dtype, _sum_dtype, _mean_dtype; pargmax and pargmin: int32). */
enum rule { SAME, SUM, MEAN, INDEX };

/* The op's shape of call: a reduction (psum ...: the input's shape),
 * all_gather (axis=, tiled=), psum_scatter (scatter_dimension=, tiled=;
 * the SUM rule), all_to_all (split_axis, concat_axis positional, tiled=),
 * and with a third positional argument and the input's shape: pswapaxes
 * (axis), ppermute (perm: pairs), pshuffle (perm: one index per group
 * member), pbroadcast (source). */
enum kind { REDUCE, ALL_GATHER, PSUM_SCATTER, ALL_TO_ALL, PSWAPAXES, PPERMUTE, PSHUFFLE,
            PBROADCAST, NKINDS };

/* The most pairs (ppermute) or entries (pshuffle) the compiled path takes. */
#define PERM_MAX 1024

/* Keywords a Collective's fast path accepts (others go to `slow`). */
enum { KW_GROUPS = 1, KW_BUCKET = 2 };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    void *fn;        /* the library's function, of the kind's type */
    axis_size_fn axis_size;
    int kind;
    int rule;
    int kws;         /* KW_*: keywords the op has besides mesh */
    PyObject *slow;  /* the package's function for the op */
    PyObject *raise_on; /* the package's _raise_on(rc, mesh pointer) */
    PyObject *state;    /* the dict of the package's state (shmesh._context) */
    PyObject *mesh_type; /* shmesh.Mesh: a mesh argument must be one, not a look-alike */
    PyObject *name, *qualname, *doc, *module, *dict;
} Collective;

static PyObject *s_ctx, *s_owner, *s_local, *s_addr, *s_p, *s_mesh, *s_groups, *s_bucket,
    *s_axis, *s_tiled, *s_scatter_dimension, *s_out;

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

/* The result's numpy dtype (a new reference) and shmesh dtype. */
static PyArray_Descr *result_of(const Collective *o, PyArray_Descr *in, int code, int *out_code)
{
    int t = -1;
    switch (o->rule) {
    case SUM: t = code == SHMESH_BOOL ? NPY_INT32 : -1; break;
    case MEAN:
        if (in->kind != 'f')
            t = in->elsize == 8 ? NPY_FLOAT64 : NPY_FLOAT32;
        break;
    case INDEX: t = NPY_INT32; break;
    default: break;
    }
    if (t < 0) {
        *out_code = code;
        Py_INCREF(in);
        return in;
    }
    *out_code = t == NPY_INT32 ? SHMESH_INT32 : t == NPY_FLOAT64 ? SHMESH_FLOAT64 : SHMESH_FLOAT32;
    return PyArray_DescrFromType(t);
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

/* The package's state `key` (borrowed), or NULL. */
static PyObject *state_item(const Collective *o, PyObject *key)
{
    return PyDict_GetItemWithError(o->state, key);
}

/* Whether this call is the package's: a context, this thread its owner,
 * one device per rank. */
static int context_ready(const Collective *o)
{
    PyObject *ctx = state_item(o, s_ctx), *owner = state_item(o, s_owner),
             *local = state_item(o, s_local);
    if (!ctx || ctx == Py_None || !owner || !PyLong_CheckExact(owner) || !local ||
        !PyLong_CheckExact(local))
        return 0;
    unsigned long who = PyLong_AsUnsignedLong(owner);
    long k = PyLong_AsLong(local);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return who == PyThread_get_thread_ident() && k == 1;
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

/* An int argument in [lo, hi) (a negative one counts from hi, as the
 * package's _axis does), or -1 for anything else (the Python path's to
 * take or refuse). */
static int axis_arg(PyObject *v, int lo, int hi)
{
    int a;
    if (int_arg(v, &a))
        return -1;
    if (a < 0)
        a += hi;
    return a >= lo && a < hi ? a : -1;
}

/* A list or tuple of at most PERM_MAX entries (each `width` ints: 1, or a
 * pair as a list or tuple of 2) into ints: their count, or -1. */
static int int_list(PyObject *v, int width, int *ints)
{
    if (!PyList_CheckExact(v) && !PyTuple_CheckExact(v))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    if (n > PERM_MAX)
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

static PyObject *collective_call(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    Collective *o = (Collective *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != (o->kind == ALL_TO_ALL ? 4 : o->kind >= PSWAPAXES ? 3 : 2))
        return slow_path(o, args, nargsf, kwnames);
    PyObject *mesh = Py_None, *axis_v = NULL, *tiled_v = Py_False, *into = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (is_kw(k, s_mesh))
            mesh = v;
        else if (is_kw(k, s_out))
            into = v == Py_None ? NULL : v;
        else if ((o->kws & KW_GROUPS) && is_kw(k, s_groups)) {
            if (v != Py_None)
                return slow_path(o, args, nargsf, kwnames);
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
        !context_ready(o))
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
    /* The result's shape, as the package's _all_gather, _psum_scatter and
     * _all_to_all work it out (the library checks the rest). */
    bool tiled = tiled_v == Py_True;
    npy_intp shape[SHMESH_MAX_NDIM + 1];
    int out_ndim = ndim, p0 = 0, p1 = 0, n = 0, perm[2 * PERM_MAX];
    memcpy(shape, PyArray_DIMS(a), sizeof *shape * (size_t)ndim);
    if (o->kind == PSWAPAXES || o->kind == PBROADCAST) {
        if (int_arg(args[2], &p0))
            goto slow;
    } else if (o->kind == PPERMUTE || o->kind == PSHUFFLE) {
        if ((p0 = int_list(args[2], o->kind == PPERMUTE ? 2 : 1, perm)) < 0)
            goto slow;
    }
    if (o->kind != REDUCE && o->kind != PSWAPAXES && o->kind != PPERMUTE &&
        o->kind != PBROADCAST) {
        Py_BEGIN_ALLOW_THREADS /* (the library may wait for the context's lock) */
        n = o->axis_size(mp, axes, &n) ? -1 : n;
        Py_END_ALLOW_THREADS
        if (n < 0) /* the Python path raises it, naming the op */
            goto slow;
    }
    switch (o->kind) {
    case ALL_GATHER:
        p0 = axis_v ? axis_arg(axis_v, 0, tiled ? ndim : ndim + 1) : tiled && !ndim ? -1 : 0;
        if (p0 < 0)
            goto slow;
        if (tiled) {
            shape[p0] *= n;
        } else {
            memmove(shape + p0 + 1, shape + p0, sizeof *shape * (size_t)(ndim - p0));
            shape[p0] = n;
            out_ndim++;
        }
        break;
    case PSUM_SCATTER:
        p0 = axis_v ? axis_arg(axis_v, 0, ndim) : ndim ? 0 : -1;
        if (p0 < 0)
            goto slow;
        if (tiled) {
            shape[p0] = n ? shape[p0] / n : 0;
        } else {
            memmove(shape + p0, shape + p0 + 1, sizeof *shape * (size_t)(ndim - p0 - 1));
            out_ndim--;
        }
        break;
    case ALL_TO_ALL:
        p0 = axis_arg(args[2], 0, ndim);
        p1 = axis_arg(args[3], 0, ndim);
        if (p0 < 0 || p1 < 0)
            goto slow;
        if (tiled) {
            shape[p0] = n ? shape[p0] / n : 0;
            shape[p1] *= n;
        } else {
            memmove(shape + p0, shape + p0 + 1, sizeof *shape * (size_t)(ndim - p0 - 1));
            memmove(shape + p1 + 1, shape + p1, sizeof *shape * (size_t)(ndim - 1 - p1));
            shape[p1] = n;
        }
        break;
    case PSHUFFLE: /* the C call reads one entry per group member */
        if (p0 != n)
            goto slow;
        break;
    default:
        break;
    }
    if (out_ndim > SHMESH_MAX_NDIM)
        goto slow;
    int out_code;
    PyArray_Descr *rd = result_of(o, PyArray_DESCR(a), code, &out_code);
    if (!rd)
        return NULL;
    PyObject *out;
    if (into) { /* out=: exactly the result's array, else the Python path says why */
        PyArrayObject *o_ = (PyArrayObject *)into;
        bool fits = PyArray_CheckExact(into) && PyArray_NDIM(o_) == out_ndim &&
                    PyArray_IS_C_CONTIGUOUS(o_) && PyArray_ISWRITEABLE(o_) &&
                    PyArray_ISNOTSWAPPED(o_) && PyArray_EquivTypes(PyArray_DESCR(o_), rd);
        for (int d = 0; fits && d < out_ndim; d++)
            fits = PyArray_DIMS(o_)[d] == shape[d];
        Py_DECREF(rd);
        if (!fits)
            goto slow;
        out = Py_NewRef(into);
    } else if (!(out = PyArray_Empty(out_ndim, shape, rd, 0))) { /* steals rd */
        return NULL;
    }
    shmesh_array in = {.data = PyArray_DATA(a), .dtype = (shmesh_dtype)code, .ndim = ndim};
    shmesh_array res = {.data = PyArray_DATA((PyArrayObject *)out),
                        .dtype = (shmesh_dtype)out_code, .ndim = out_ndim};
    for (int d = 0; d < ndim; d++)
        in.shape[d] = PyArray_DIMS(a)[d];
    for (int d = 0; d < out_ndim; d++)
        res.shape[d] = shape[d];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    switch (o->kind) {
    case ALL_GATHER:
    case PSUM_SCATTER:
        rc = ((gather_fn)o->fn)(mp, axes, NULL, p0, tiled, &in, &res);
        break;
    case ALL_TO_ALL:
        rc = ((all_to_all_fn)o->fn)(mp, axes, NULL, p0, p1, tiled, &in, &res);
        break;
    case PSWAPAXES:
        rc = ((swap_fn)o->fn)(mp, axes, NULL, p0, &in, &res);
        break;
    case PPERMUTE:
        rc = ((ppermute_fn)o->fn)(mp, axes, (const int(*)[2])perm, p0, &in, &res);
        break;
    case PSHUFFLE:
        rc = ((pshuffle_fn)o->fn)(mp, axes, perm, &in, &res);
        break;
    case PBROADCAST:
        rc = ((pbroadcast_fn)o->fn)(mp, axes, p0, &in, &res);
        break;
    default:
        rc = ((reduce_fn)o->fn)(mp, axes, NULL, &in, &res);
        break;
    }
    Py_END_ALLOW_THREADS
    if (!rc)
        return out;
    Py_DECREF(out);
    /* _raise_on(rc, the mesh's pointer object, or None) raises. */
    PyObject *mesh_p = mesh == Py_None ? Py_NewRef(Py_None) : PyObject_GetAttr(mesh, s_p);
    if (mesh_p) {
        PyObject *r = PyObject_CallFunction(o->raise_on, "iO", rc, mesh_p);
        Py_DECREF(mesh_p);
        Py_XDECREF(r);
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "shmesh: error %d was not raised", rc);
    return NULL;
slow:
    if (PyErr_Occurred())
        return NULL;
    return slow_path(o, args, nargsf, kwnames);
}

/* Collective(fn_address, kind, rule, kws, slow, raise_on, state, mesh_type,
 * axis_size_address): state the dict of the module that holds _ctx, _owner
 * and _local_devices, mesh_type the class Mesh.  The class is given, not
 * looked up in state: the package's modules each hold their own names. */
static PyObject *collective_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    unsigned long long fn, axis_size = 0;
    int kind, rule, kws;
    PyObject *slow, *raise_on, *state, *mesh_type;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Collective takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "KiiiOOO!O!|K", &fn, &kind, &rule, &kws, &slow, &raise_on,
                          &PyDict_Type, &state, &PyType_Type, &mesh_type, &axis_size))
        return NULL;
    if (!fn || kind < REDUCE || kind >= NKINDS || !axis_size ||
        rule < SAME || rule > INDEX || !PyCallable_Check(slow) || !PyCallable_Check(raise_on)) {
        PyErr_SetString(PyExc_ValueError,
                        "Collective: a function address, a kind (0..7), a rule (0..3), "
                        "keywords, two callables, the state's dict, the Mesh class and "
                        "shmesh_axis_size's address");
        return NULL;
    }
    Collective *o = (Collective *)type->tp_alloc(type, 0);
    if (!o)
        return NULL;
    o->vectorcall = collective_call;
    o->fn = (void *)(uintptr_t)fn;
    o->axis_size = (axis_size_fn)(uintptr_t)axis_size;
    o->kind = kind;
    o->rule = rule;
    o->kws = kws;
    Py_INCREF(slow);
    Py_INCREF(raise_on);
    Py_INCREF(state);
    Py_INCREF(mesh_type);
    o->slow = slow;
    o->raise_on = raise_on;
    o->state = state;
    o->mesh_type = mesh_type;
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
    Py_VISIT(o->state);
    Py_VISIT(o->mesh_type);
    Py_VISIT(o->dict);
    return 0;
}

static int collective_clear(Collective *o)
{
    Py_CLEAR(o->slow);
    Py_CLEAR(o->raise_on);
    Py_CLEAR(o->state);
    Py_CLEAR(o->mesh_type);
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

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shmesh._ext",
    "The compiled per-call path of shmesh's Python binding (see _ext.c).", -1, NULL,
};

PyMODINIT_FUNC PyInit__ext(void);
PyMODINIT_FUNC PyInit__ext(void)
{
    import_array();
    if (PyType_Ready(&CollectiveType) < 0)
        return NULL;
    s_ctx = PyUnicode_InternFromString("_ctx");
    s_owner = PyUnicode_InternFromString("_owner");
    s_local = PyUnicode_InternFromString("_local_devices");
    s_addr = PyUnicode_InternFromString("_addr");
    s_p = PyUnicode_InternFromString("_p");
    s_mesh = PyUnicode_InternFromString("mesh");
    s_groups = PyUnicode_InternFromString("axis_index_groups");
    s_bucket = PyUnicode_InternFromString("bucket_bytes");
    s_axis = PyUnicode_InternFromString("axis");
    s_tiled = PyUnicode_InternFromString("tiled");
    s_scatter_dimension = PyUnicode_InternFromString("scatter_dimension");
    s_out = PyUnicode_InternFromString("out");
    if (!s_ctx || !s_owner || !s_local || !s_addr || !s_p || !s_mesh || !s_groups || !s_bucket ||
        !s_axis || !s_tiled || !s_scatter_dimension || !s_out)
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
