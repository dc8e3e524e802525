/* Ops and call descriptions: names, one-line descriptions, hashes, and the
 * sentence that explains a mismatch.  A description may be a peer's, copied
 * out of the segment: everything here reads it as untrusted bytes (texts
 * bounded by their arrays, every value checked before it indexes anything). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "engine/desc.h"

static const struct {
    const char *name, *params;
} ops[OP_COUNT] = {
#define OP_INFO(ID, nm, scope, bus, bin, prm, ...) [OP_##ID] = {"shmesh_" #nm, prm},
    SHMESH_OPS(OP_INFO)
#undef OP_INFO
};

const char *op_name(enum call_op op)
{
    return (unsigned)op < OP_COUNT ? ops[op].name : NULL;
}

/* A line being written into buf[len]: never past it, always terminated. */
struct line {
    char *buf;
    size_t len, n;
    bool cut; /* something did not fit */
};

static void put(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct line *l, const char *fmt, ...)
{
    if (l->n + 1 >= l->len) {
        l->cut = true;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(l->buf + l->n, l->len - l->n, fmt, ap);
    va_end(ap);
    if (w < 0)
        return;
    if ((size_t)w >= l->len - l->n) {
        l->n = l->len - 1;
        l->cut = true;
    } else {
        l->n += (size_t)w;
    }
}

/* At most `max` bytes of s, up to its first NUL: printable ASCII as it is,
 * any other byte as \xNN. */
static void put_text(struct line *l, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && l->n + 1 < l->len)
            l->buf[l->n++] = (char)ch;
        else if (ch >= 0x20 && ch < 0x7f)
            l->cut = true;
        else
            put(l, "\\x%02x", ch);
    }
    l->buf[l->n] = 0;
}

/* "float32[4,3]", "float32[4,3] on device"; "dtype 99?[...]", "[ndim 12?]"
 * for values out of range. */
static void put_array(struct line *l, uint32_t dtype, int32_t ndim, const int64_t *shape,
                      uint8_t device)
{
    if (dtype < (uint32_t)SHMESH_DTYPE_COUNT)
        put(l, "%s[", shmesh_dtype_name((shmesh_dtype)dtype));
    else
        put(l, "dtype %" PRIu32 "?[", dtype);
    if (ndim < 0 || ndim > SHMESH_MAX_NDIM) {
        put(l, "ndim %" PRId32 "?]", ndim);
        return;
    }
    for (int d = 0; d < ndim; d++)
        put(l, "%s%" PRId64, d ? "," : "", shape[d]);
    put(l, device ? "] on device" : "]");
}

/* ", axis=0, tiled=true": the op's parameters, named by the op table. */
static void put_params(struct line *l, const char *names, const int64_t *pa)
{
    for (int i = 0; *names && i < 4; i++) {
        size_t w = strcspn(names, " ");
        bool flag = w && names[w - 1] == '?';
        int shown = (int)(flag ? w - 1 : w);
        if (names[0] != '_') {
            if (flag && (pa[i] == 0 || pa[i] == 1))
                put(l, ", %.*s=%s", shown, names, pa[i] ? "true" : "false");
            else
                put(l, ", %.*s=%" PRId64 "%s", shown, names, pa[i], flag ? "?" : "");
        }
        names += w;
        names += strspn(names, " ");
    }
}

/* The resolved axes, only when they cannot be a mesh's. */
static void put_bad_axes(struct line *l, const struct call_desc *d)
{
    if (d->naxes < 0 || d->naxes > SHMESH_MAX_MESH_DIMS) {
        put(l, ", naxes %" PRId32 "?", d->naxes);
        return;
    }
    for (int k = 0; k < d->naxes; k++)
        if (d->axis[k] >= SHMESH_MAX_MESH_DIMS)
            put(l, ", axis %d is dimension %u?", k, (unsigned)d->axis[k]);
}

/* "a=2, b=2": mesh_create's names (its axes text) with their sizes. */
static void put_mesh(struct line *l, const struct call_desc *d)
{
    const char *t = d->axes;
    size_t tl = strnlen(t, sizeof d->axes), at = 0;
    bool nd_ok = d->ndim >= 0 && d->ndim <= SHMESH_MAX_NDIM;
    int nd = nd_ok ? d->ndim : 0;
    for (int k = 0; at < tl || k < nd; k++) {
        if (k)
            put(l, ", ");
        if (at < tl) {
            const char *comma = memchr(t + at, ',', tl - at);
            size_t w = comma ? (size_t)(comma - (t + at)) : tl - at;
            put_text(l, t + at, w);
            at += w + 1;
        } else {
            put(l, "?");
        }
        if (k < nd)
            put(l, "=%" PRId64, d->shape[k]);
        else
            put(l, "=?");
    }
    if (!nd_ok)
        put(l, "%sndim %" PRId32 "?", tl ? ", " : "", d->ndim);
}

void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len)
{
    if (!len)
        return;
    struct line l = {buf, len, 0, false};
    buf[0] = 0;
    const char *name = op_name((enum call_op)d->op);
    if (!name) {
        put(&l, "an unknown collective (op %" PRIu32 ", call #%" PRIu64 ")", d->op, call);
        return;
    }
    switch (d->op) {
    case OP_BARRIER:
    case OP_FINALIZE:
        put(&l, "%s", name);
        break;
    case OP_WORLD_SUM:
        put(&l, "%s(count=%" PRIu64 ", ", name, (uint64_t)d->param[0]);
        if (d->dtype < (uint32_t)SHMESH_DTYPE_COUNT)
            put(&l, "%s)", shmesh_dtype_name((shmesh_dtype)d->dtype));
        else
            put(&l, "dtype %" PRIu32 "?)", d->dtype);
        break;
    case OP_EFFECT_CREATE:
    case OP_CALLBACK: /* the effect's name, and the op's values */
        put(&l, "%s(\"", name);
        put_text(&l, d->axes, sizeof d->axes);
        put(&l, "\"");
        put_params(&l, ops[d->op].params, d->param);
        put(&l, ")");
        break;
    case OP_MESH_CREATE:
        put(&l, "%s(", name);
        put_mesh(&l, d);
        put(&l, ")");
        break;
    default:
        put(&l, "%s(\"", name);
        put_text(&l, d->axes, sizeof d->axes);
        put(&l, "\", ");
        put_array(&l, d->dtype, d->ndim, d->shape, d->in_device);
        put(&l, " -> ");
        put_array(&l, d->out_dtype, d->out_ndim, d->out_shape, d->out_device);
        put_params(&l, ops[d->op].params, d->param);
        if (d->groups[0]) {
            put(&l, ", axis_index_groups=");
            put_text(&l, d->groups, sizeof d->groups);
        }
        put_bad_axes(&l, d);
        put(&l, ")");
    }
    put(&l, " (call #%" PRIu64 ")", call);
    if (l.cut && len > 4)
        memcpy(buf + len - 4, "...", 4);
}

/* Only what identifies the call: the used dimensions, the axes as mesh
 * dimensions (the mesh id says which mesh, and mesh_create checked that
 * every rank has the same one), the parameters and extra_hash (groups,
 * permutations, mesh_create's names and order), not the whole description
 * (hashing it all cost more than the rest of a small call).  The texts are
 * for people. */
uint64_t call_hash(const struct call_desc *d)
{
    uint64_t h = hash_mix(0x9E3779B97F4A7C15ull, d->op | (uint64_t)(uint32_t)d->mesh << 32);
    h = hash_mix(h, d->dtype | (uint64_t)d->out_dtype << 32);
    h = hash_mix(h, (uint32_t)d->ndim | (uint64_t)(uint32_t)d->out_ndim << 32);
    for (int k = 0; k < d->ndim && k < SHMESH_MAX_NDIM; k++)
        h = hash_mix(h, (uint64_t)d->shape[k]);
    for (int k = 0; k < d->out_ndim && k < SHMESH_MAX_NDIM; k++)
        h = hash_mix(h, (uint64_t)d->out_shape[k]);
    for (int k = 0; k < 4; k++)
        h = hash_mix(h, (uint64_t)d->param[k]);
    uint64_t axes = 0;
    memcpy(&axes, d->axis, sizeof d->axis);
    h = hash_mix(h, axes ^ (uint64_t)d->in_device << 62 ^ (uint64_t)d->out_device << 63);
    return hash_mix(h, d->extra_hash ^ (uint64_t)(uint32_t)d->naxes);
}

/* s cut to at most `keep` characters, the cut marked. */
static void cut(char *s, size_t keep)
{
    if (strlen(s) <= keep)
        return;
    if (keep >= 3)
        memcpy(s + keep - 3, "...", 3);
    s[keep] = 0;
}

void call_mismatch_text(char *buf, size_t len, uint64_t call, const struct call_desc *mine,
                        int other_rank, const struct call_desc *theirs, const char *settings)
{
    if (!len)
        return;
    char a[1024], b[1024], who[48], note[160] = "";
    call_describe(mine, call, a, sizeof a);
    if (!theirs) {
        snprintf(b, sizeof b,
                 "something else: its step of call #%" PRIu64 " is gone, so the ranks disagree "
                 "about this call's groups or sizes",
                 call);
    } else if (theirs->tuning != mine->tuning && call_hash(theirs) == call_hash(mine)) {
        snprintf(b, sizeof b, "the same with other settings: %s",
                 settings ? settings
                          : "the hashed settings (docs/environment.md) must be the same on "
                            "every rank");
    } else {
        call_describe(theirs, call, b, sizeof b);
        if (!strcmp(a, b)) { /* what differs is not shown */
            if (theirs->mesh != mine->mesh)
                snprintf(note, sizeof note, " (on mesh %" PRId32 ", there mesh %" PRId32 ")",
                         mine->mesh, theirs->mesh);
            else if (theirs->param[CALL_PARAM_BATCH] != mine->param[CALL_PARAM_BATCH])
                snprintf(note, sizeof note,
                         " (on a mesh with a batched axis of %" PRId64 ", there %" PRId64 ")",
                         mine->param[CALL_PARAM_BATCH], theirs->param[CALL_PARAM_BATCH]);
            else if (theirs->naxes != mine->naxes || memcmp(theirs->axis, mine->axis, sizeof mine->axis))
                snprintf(note, sizeof note, " (with the axes as other mesh dimensions)");
            else if (theirs->extra_hash != mine->extra_hash)
                snprintf(note, sizeof note,
                         " (with other axis_index_groups, permutation or device order)");
            else
                snprintf(note, sizeof note, " (with other parameters)");
        }
    }
    snprintf(who, sizeof who, " but rank %d called ", other_rank);
    size_t fixed = strlen("called ") + strlen(who) + strlen(note);
    size_t room = len - 1 > fixed ? len - 1 - fixed : 0;
    size_t la = strlen(a), lb = strlen(b);
    if (la + lb > room) { /* both named, each cut as little as possible */
        size_t half = room / 2;
        if (la <= half)
            cut(b, room - la);
        else if (lb <= room - half)
            cut(a, room - lb);
        else {
            cut(a, half);
            cut(b, room - half);
        }
    }
    snprintf(buf, len, "called %s%s%s%s", a, who, b, note);
}
