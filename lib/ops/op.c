/* Ops and call descriptions: names, one-line descriptions, hashes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "ops/args.h"
#include "ops/op.h"

static const struct {
    const char *name, *params;
} ops[OP_COUNT] = {
#define OP_INFO(ID, nm, scope, bus, bin, prm) [OP_##ID] = {"shmesh_" #nm, prm},
    SHMESH_OPS(OP_INFO)
#undef OP_INFO
};

const char *op_name(enum call_op op)
{
    return (unsigned)op < OP_COUNT ? ops[op].name : NULL;
}

/* ", axis=0, tiled=true": the op's parameters, named by the op table. */
static void op_params(const char *names, const int64_t *pa, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; *names && i < 4 && n < len; i++) {
        size_t w = strcspn(names, " ");
        bool flag = w && names[w - 1] == '?';
        size_t shown = flag ? w - 1 : w;
        if (names[0] != '_') {
            if (flag)
                n += (size_t)snprintf(buf + n, len - n, ", %.*s=%s", (int)shown, names,
                                      pa[i] ? "true" : "false");
            else
                n += (size_t)snprintf(buf + n, len - n, ", %.*s=%" PRId64, (int)shown, names,
                                      pa[i]);
        }
        names += w;
        names += strspn(names, " ");
    }
}

void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len)
{
    const char *name = op_name((enum call_op)d->op);
    if (!name) {
        snprintf(buf, len, "an unknown collective (op %u, call #%" PRIu64 ")", d->op, call);
        return;
    }
    char in[128], out[128];
    shape_format(in, sizeof in, (shmesh_dtype)d->dtype, d->ndim, d->shape);
    shape_format(out, sizeof out, (shmesh_dtype)d->out_dtype, d->out_ndim, d->out_shape);
    switch (d->op) {
    case OP_BARRIER:
    case OP_FINALIZE:
        snprintf(buf, len, "%s (call #%" PRIu64 ")", name, call);
        break;
    case OP_WORLD_SUM:
        snprintf(buf, len, "%s(count=%" PRIu64 ", %s) (call #%" PRIu64 ")", name, (uint64_t)d->param[0],
                 shmesh_dtype_name((shmesh_dtype)d->dtype), call);
        break;
    case OP_MESH_CREATE: {
        char sizes[128] = "";
        int n = 0;
        for (int k = 0; k < d->ndim && k < SHMESH_MAX_NDIM && n < (int)sizeof sizes; k++)
            n += snprintf(sizes + n, sizeof sizes - (size_t)n, "%s%" PRId64, k ? "," : "",
                          d->shape[k]);
        snprintf(buf, len, "%s(axes \"%s\", sizes [%s]) (call #%" PRIu64 ")", name, d->axes,
                 sizes, call);
        break;
    }
    default: {
        char params[96];
        op_params(ops[d->op].params, d->param, params, sizeof params);
        snprintf(buf, len, "%s(\"%s\", %s -> %s%s%s%s) (call #%" PRIu64 ")", name, d->axes,
                 in, out, params, d->groups[0] ? ", axis_index_groups=" : "", d->groups, call);
    }
    }
}

/* Only what identifies the call: the used dimensions and the axes' text,
 * not the whole description (hashing it all cost more than the rest of a
 * small call).  The groups' text is covered by extra_hash. */
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
    h = hash_mix(h, d->extra_hash);
    size_t len = strnlen(d->axes, sizeof d->axes);
    return len ? hash_bytes(d->axes, len, h) : h;
}

