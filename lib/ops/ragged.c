/* ragged_all_to_all.  Two exchanges: first every member publishes its
 * offsets and sizes, so that every member can check every slice of the
 * call against both ends' buffers and reach the same verdict; only then do
 * rows move. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/dtype.h"
#include "ops/args.h"
#include "ops/ops.h"
#include "ops/prologue.h"

enum { IN_OFF, SEND, OUT_OFF, RECV, NPARAM };

struct ragged {
    /* Copies of the call's arrays (the call may move: engine/dispatch.c). */
    shmesh_array operand, output;
    int64_t k;       /* entries per offset/size array */
    int64_t per;     /* entries per destination: k / n */
    uint64_t row;    /* bytes per row */
    bool rows;       /* the parameters are exchanged and checked: rows move */
    int64_t table[]; /* [member][param][k], int64 */
};

static const char *const param_name[NPARAM] = {"input_offsets", "send_sizes", "output_offsets",
                                                "recv_sizes"};

static int64_t *entry(const struct ragged *r, int member, int p)
{
    return (int64_t *)r->table + ((size_t)member * NPARAM + (size_t)p) * (size_t)r->k;
}

static int64_t load_index(const shmesh_array *a, int64_t i)
{
    switch (a->dtype) {
    case SHMESH_INT8: return ((const int8_t *)a->data)[i];
    case SHMESH_INT16: return ((const int16_t *)a->data)[i];
    case SHMESH_INT32: return ((const int32_t *)a->data)[i];
    case SHMESH_INT64: return ((const int64_t *)a->data)[i];
    case SHMESH_UINT8: return ((const uint8_t *)a->data)[i];
    case SHMESH_UINT16: return ((const uint16_t *)a->data)[i];
    case SHMESH_UINT32: return ((const uint32_t *)a->data)[i];
    default: {
        uint64_t u = ((const uint64_t *)a->data)[i];
        return u > INT64_MAX ? INT64_MAX : (int64_t)u; /* out of range either way */
    }
    }
}

/* Exchange 1: the parameters, as int64, to everyone. */
static uint64_t param_bytes(const struct call *k, int from, int to)
{
    const struct ragged *r = k->op_state;
    return (uint64_t)NPARAM * (uint64_t)r->k * sizeof(int64_t);
}

static void param_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct ragged *r = k->op_state;
    /* This device's own row of the table was filled before the exchange. */
    memcpy(dst, (const unsigned char *)entry(r, k->g.me, 0) + off, len);
}

static void param_recv(const struct call *k, int from, uint64_t off, const void *src,
                       uint64_t len)
{
    const struct ragged *r = k->op_state;
    memcpy((unsigned char *)entry(r, from, 0) + off, src, len);
}

/* Exchange 2: the rows.  What `from` sends `to` is the concatenation of its
 * slices for `to`, in entry order. */
static uint64_t row_bytes(const struct call *k, int from, int to)
{
    const struct ragged *r = k->op_state;
    uint64_t total = 0;
    for (int64_t s = 0; s < r->per; s++)
        total += (uint64_t)entry(r, from, SEND)[to * r->per + s];
    return total * r->row;
}

/* Visits the part [off, off+len) of the concatenated slices that `from` sends
 * `to`: for each piece, the sender's row, the receiver's row, and the bytes. */
static void walk_slices(const struct ragged *r, int from, int to, uint64_t off, uint64_t len,
                        void (*piece)(const struct ragged *r, int64_t in_row, int64_t out_row,
                                      uint64_t skip, uint64_t at, uint64_t bytes, void *arg),
                        void *arg)
{
    uint64_t pos = 0, end = off + len;
    for (int64_t s = 0; s < r->per && pos < end; s++) {
        int64_t i = to * r->per + s;
        uint64_t bytes = (uint64_t)entry(r, from, SEND)[i] * r->row;
        uint64_t a = pos > off ? pos : off, b = pos + bytes < end ? pos + bytes : end;
        if (a < b)
            piece(r, entry(r, from, IN_OFF)[i], entry(r, from, OUT_OFF)[i], a - pos, a - off,
                  b - a, arg);
        pos += bytes;
    }
}

static void pack_piece(const struct ragged *r, int64_t in_row, int64_t out_row, uint64_t skip,
                       uint64_t at, uint64_t bytes, void *dst)
{
    memcpy((unsigned char *)dst + at,
           (const unsigned char *)r->operand.data + (uint64_t)in_row * r->row + skip, bytes);
}

static void unpack_piece(const struct ragged *r, int64_t in_row, int64_t out_row, uint64_t skip,
                         uint64_t at, uint64_t bytes, void *src)
{
    memcpy((unsigned char *)r->output.data + (uint64_t)out_row * r->row + skip,
           (const unsigned char *)src + at, bytes);
}

/* A piece straight from the sender's operand to its rows of the output. */
static void pack_piece_to_output(const struct ragged *r, int64_t in_row, int64_t out_row,
                                 uint64_t skip, uint64_t at, uint64_t bytes, void *unused)
{
    (void)at;
    (void)unused;
    memcpy((unsigned char *)r->output.data + (uint64_t)out_row * r->row + skip,
           (const unsigned char *)r->operand.data + (uint64_t)in_row * r->row + skip, bytes);
}

static void row_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    walk_slices(k->op_state, k->g.me, to, off, len, pack_piece, dst);
}

static void row_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    walk_slices(k->op_state, from, k->g.me, off, len, unpack_piece, (void *)src);
}

/* The same verdict on every member: the first bad entry in (sender, entry)
 * order, checked against the sender's operand and the receiver's output. */
static int check_slices(struct call *k, const struct ragged *r)
{
    int64_t n_rows = r->operand.shape[0], m_rows = r->output.shape[0];
    for (int q = 0; q < k->g.n; q++) {
        uint64_t sent = 0; /* bytes of q's transfer so far: slices may overlap */
        for (int64_t i = 0; i < r->k; i++) {
            int64_t in_off = entry(r, q, IN_OFF)[i], send = entry(r, q, SEND)[i];
            int64_t out_off = entry(r, q, OUT_OFF)[i];
            int to = (int)(i / r->per);
            int64_t recv = entry(r, to, RECV)[q * r->per + i % r->per];
            const char *why = NULL;
            char buf[200];
            if (send < 0)
                why = "send_sizes is negative";
            else if (in_off < 0 || in_off > n_rows - send)
                snprintf(buf, sizeof buf,
                         "input_offsets %" PRId64 " + send_sizes %" PRId64
                         " leaves operand's %" PRId64 " rows",
                         in_off, send, n_rows),
                    why = buf;
            else if (out_off < 0 || out_off > m_rows - send)
                snprintf(buf, sizeof buf,
                         "output_offsets %" PRId64 " + send_sizes %" PRId64
                         " leaves the receiver's output of %" PRId64 " rows",
                         out_off, send, m_rows),
                    why = buf;
            else if (recv != send)
                snprintf(buf, sizeof buf,
                         "it sends %" PRId64 " rows but the receiver (rank %d) expects %" PRId64
                         " (its recv_sizes[%" PRId64 "]); send_sizes must equal "
                         "all_to_all(recv_sizes)",
                         send, k->g.ranks[to], recv, q * r->per + i % r->per),
                    why = buf;
            if (why)
                return ctx_fail(k->c, SHMESH_ERR_INVALID,
                                "%s: rank %d's entry %" PRId64 " (to group index %d): %s; nothing "
                                "was sent",
                                k->name, k->g.ranks[q], i, to, why);
            /* Within the operand, a slice has at most 2^62 bytes. */
            uint64_t bytes = (uint64_t)send * r->row;
            if (sent > (UINT64_C(1) << 62) - bytes)
                return ctx_fail(k->c, SHMESH_ERR_INVALID,
                                "%s: rank %d's slices up to entry %" PRId64 " add up to more than "
                                "2^62 bytes (rows of %" PRIu64 " bytes), too large to address; "
                                "nothing was sent",
                                k->name, k->g.ranks[q], i, r->row);
            sent += bytes;
        }
    }
    return 0;
}

static int check_args(struct call *k, const shmesh_array *operand, shmesh_array *output,
                      const shmesh_array *const param[NPARAM], struct ragged *r)
{
    shmesh_ctx *c = k->c;
    uint64_t n_op, n_out, cnt;
    int rc;
    if ((rc = coll_arrays(k, operand, "operand", output, "output", &n_op, &n_out)))
        return rc;
    if (operand->ndim < 1 || output->dtype != operand->dtype || output->ndim != operand->ndim)
        goto shapes;
    for (int d = 1; d < operand->ndim; d++)
        if (output->shape[d] != operand->shape[d])
            goto shapes;
    for (int p = 0; p < NPARAM; p++) {
        const shmesh_array *a = param[p];
        if ((rc = array_check(c, k->name, param_name[p], a, &cnt)))
            return rc;
        if (!dtype_is_int(a->dtype))
            return ctx_fail(c, SHMESH_ERR_INVALID, "%s: ragged_all_to_all %s must be integer type, got %s",
                            k->name, param_name[p], shmesh_dtype_name(a->dtype));
        if (a->ndim != 1 || a->shape[0] < 1) {
            char got[160];
            shape_format(got, sizeof got, a->dtype, a->ndim, a->shape);
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: ragged_all_to_all %s must be rank 1 with positive dimension "
                            "size, but got shape %s",
                            k->name, param_name[p], got);
        }
        if (a->shape[0] != param[0]->shape[0])
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: %s has %" PRId64 " entries but input_offsets has %" PRId64
                            "; all four must have the same length",
                            k->name, param_name[p], a->shape[0], param[0]->shape[0]);
    }
    r->k = param[0]->shape[0];
    if (r->k % k->g.n)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: the offset and size arrays have %" PRId64 " entries, not a multiple "
                        "of the group size %d",
                        k->name, r->k, k->g.n);
    r->per = r->k / k->g.n;
    /* The table of every member's four arrays (and the exchange of it) in
     * int64: k entries of any integer type may be 8 times as many bytes. */
    if ((uint64_t)r->k > SIZE_MAX / sizeof(int64_t) / NPARAM / (uint64_t)k->g.n)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: the offset and size arrays have %" PRId64 " entries; %d members' "
                        "four arrays as int64 are too large to address",
                        k->name, r->k, k->g.n);
    r->operand = *operand;
    r->output = *output;
    /* A row's bytes: operand's dimensions after the first.  A zero-row
     * operand passes array_check whatever they are. */
    int64_t row_shape[SHMESH_MAX_NDIM];
    memcpy(row_shape, operand->shape + 1, sizeof *row_shape * (size_t)(operand->ndim - 1));
    if (!shape_scale(operand->dtype, operand->ndim - 1, row_shape, -1, 1))
        return shape_refuse(c, k->name, "a row", operand->dtype, operand->ndim - 1, row_shape,
                            -1, 1, "operand", operand, "past its first dimension");
    r->row = dtype_size(operand->dtype);
    for (int d = 1; d < operand->ndim; d++)
        r->row *= (uint64_t)operand->shape[d];
    return coll_no_overlap(k, operand->data, n_op * dtype_size(operand->dtype),
                           output->data, n_out * dtype_size(output->dtype), false);
shapes: {
    char a[160], b[160];
    shape_format(a, sizeof a, operand->dtype, operand->ndim, operand->shape);
    shape_format(b, sizeof b, output->dtype, output->ndim, output->shape);
    return ctx_fail(c, SHMESH_ERR_INVALID,
                    "%s: operand and output must share dtype and every dimension but the "
                    "first, and have at least one; got operand %s and output %s",
                    k->name, a, b);
}
}

static const struct transfers param_transfers = {.broadcast = true,
                                             .control = true,
                                             .unit = sizeof(int64_t),
                                             .bytes = param_bytes,
                                             .pack = param_pack,
                                             .recv = param_recv};
static const struct transfers row_transfers = {
    .unit = 1, .bytes = row_bytes, .pack = row_pack, .recv = row_recv};

/* After the parameters: every member checks every slice alike, then the
 * rows move. */
static int ragged_then(struct call *k)
{
    struct ragged *r = k->op_state;
    if (r->rows)
        return 0;
    int rc = check_slices(k, r);
    if (rc)
        return rc;
    r->rows = true;
    k->f.transfers = &row_transfers;
    k->f.host_data = false; /* the rows: the operand and the output */
    return 1;
}

/* Several devices per rank (front/local_devices.c, front/devices_transfers.c):
 * a device publishes its row of the table; with every member's row mapped
 * here (k->s->zin[q]) it checks every slice as the members do, and takes
 * the rows exchange's transfers.  Then, with each member's operand at
 * k->s->zin[q] (NULL: one whose rows the exchange brought), it takes its
 * rows out of the senders' operands. */
static uint64_t table_row_bytes(const struct ragged *r)
{
    return (uint64_t)NPARAM * (uint64_t)r->k * sizeof(int64_t);
}

static void ragged_pub_pack(const struct call *k, void *dst)
{
    const struct ragged *r = k->op_state;
    memcpy(dst, entry(r, k->g.me, 0), (size_t)table_row_bytes(r));
}

static int ragged_local(struct call *k, bool write)
{
    struct ragged *r = k->op_state;
    if (!write) {
        uint64_t t = table_row_bytes(r);
        for (int q = 0; q < k->g.n; q++)
            memcpy(entry(r, q, 0), k->s->zin[q], (size_t)t);
        int rc = check_slices(k, r);
        if (!rc) {
            r->rows = true;
            k->f.transfers = &row_transfers;
        }
        return rc;
    }
    /* The pieces read the sender's operand through r->operand: point it at
     * each sender's in turn (the table is shared). */
    void *own = r->operand.data;
    for (int q = 0; q < k->g.n; q++) {
        if (!k->s->zin[q])
            continue;
        r->operand.data = k->s->zin[q];
        walk_slices(r, q, k->g.me, 0, row_bytes(k, q, k->g.me), pack_piece_to_output, NULL);
    }
    r->operand.data = own;
    return 0;
}

/* Device buffers (paths/device_ipc.c): the rows `from` sends this member,
 * out of from's operand mapped at src, by the device path's copies. */
struct dev_piece {
    const unsigned char *src;
    unsigned char *out;
    int (*copy)(void *arg, void *dst, const void *src, uint64_t n);
    void *arg;
    int rc;
};

static void dev_piece(const struct ragged *r, int64_t in_row, int64_t out_row, uint64_t skip,
                      uint64_t at, uint64_t bytes, void *arg)
{
    struct dev_piece *p = arg;
    (void)at;
    if (!p->rc)
        p->rc = p->copy(p->arg, p->out + (uint64_t)out_row * r->row + skip,
                        p->src + (uint64_t)in_row * r->row + skip, bytes);
}

static int ragged_dev_rows(struct call *k, int from, const unsigned char *src,
                           int (*copy)(void *arg, void *dst, const void *src, uint64_t n),
                           void *arg)
{
    struct dev_piece p = {src, k->f.out.data, copy, arg, 0};
    walk_slices(k->op_state, from, k->g.me, 0, row_bytes(k, from, k->g.me), dev_piece, &p);
    return p.rc;
}

/* Host staging of device buffers replaced the flow's (paths/device_staged.c). */
static void ragged_rebind(struct call *k)
{
    struct ragged *r = k->op_state;
    r->operand.data = k->f.in.data;
    r->output.data = k->f.out.data;
}

static void ragged_free(struct call *k)
{
    free(k->op_state);
    k->op_state = NULL;
}

OP_PREPARE_INLINE int op_ragged_all_to_all_prepare(struct call *k, const struct op_args *args, int l)
{
    const shmesh_array *operand = args->in + l;
    shmesh_array *output = args->out + l;
    struct axes a;
    int rc = coll_open(k, args->m, OP_RAGGED_ALL_TO_ALL, args->axes, args->gs, true, &a, NULL,
                       NULL);
    if (rc)
        return rc;
    const shmesh_array *const param[NPARAM] = {args->offsets[0] + l, args->offsets[1] + l,
                                               args->offsets[2] + l, args->offsets[3] + l};
    struct ragged hdr = {0};
    if ((rc = check_args(k, operand, output, param, &hdr)))
        return rc;
    /* The index arrays are read here, on the host. */
    for (int p = 0; p < NPARAM; p++) {
        const char *backend = NULL;
        uint64_t bytes = (uint64_t)hdr.k * dtype_size(param[p]->dtype);
        if (mem_classify(k->c, param[p]->data, bytes, NULL, &backend) == MEM_DEVICE)
            return ctx_fail(k->c, SHMESH_ERR_INVALID,
                            "%s: %s is device memory (claimed by the '%s' backend); the index "
                            "arrays must be host memory",
                            k->name, param_name[p], backend);
    }
    struct flow *f = &k->f;
    flow_init(f, FLOW_TRANSFERS, operand, output);
    f->transfers = &param_transfers;
    f->host_data = true; /* the offsets first, through the host paths */
    if ((rc = coll_ready(k)))
        return rc;
    size_t entries = (size_t)k->g.n * NPARAM * (size_t)hdr.k;
    struct ragged *r = malloc(sizeof *r + sizeof *r->table * entries);
    if (!r)
        return ctx_fail(k->c, SHMESH_ERR_NOMEM,
                        "%s: out of memory for %d x 4 x %" PRId64 " entries", k->name, k->g.n,
                        hdr.k);
    *r = hdr;
    /* The call's own copies: the caller's arrays may change once it is made. */
    r->operand = f->in;
    r->output = f->out;
    for (int p = 0; p < NPARAM; p++)
        for (int64_t i = 0; i < r->k; i++)
            entry(r, k->g.me, p)[i] = load_index(param[p], i);
    k->op_state = r;
    k->op_free = ragged_free;
    k->rebind = ragged_rebind;
    k->dev_rows = ragged_dev_rows;
    k->then = ragged_then;
    k->pub_bytes = table_row_bytes(r);
    k->pub_pack = ragged_pub_pack;
    k->local = ragged_local;
    k->d.param[0] = r->k;
    for (int p = 0; p < NPARAM; p++)
        k->d.param[1] = k->d.param[1] * SHMESH_DTYPE_COUNT + param[p]->dtype;
    return 0;
}

