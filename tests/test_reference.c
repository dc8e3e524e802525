/* Description: the single-process reference model of the collectives
 * (tests/reference.c) checked on the examples of JAX's docstrings (psum,
 * pmean, all_gather, psum_scatter, axis_index, ragged_all_to_all) and on
 * hand-worked cases for the rest: NaN propagation, argmax ties, wrapping,
 * half-precision accumulation, summation order inside subgroups,
 * all_to_all layouts, permutations, device_order, ragged refusals that stop
 * one group only, refused arguments, and the op list taken from the
 * library's op table. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/half.h"
#include "reference.h"

#define MAXW 16

static const char *const names_i[] = {"i"};
static const char *const names_ij[] = {"i", "j"};
static const char *const names_xy[] = {"x", "y"};

/* One run of the model: the outputs of every device. */
struct res {
    int rc;
    char why[256];
    int world;
    shmesh_array out[MAXW];
};

static void res_free(struct res *r)
{
    for (int d = 0; d < r->world; d++)
        free(r->out[d].data);
    memset(r, 0, sizeof *r);
}

static size_t esz(shmesh_dtype dt)
{
    static const size_t s[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8};
    return s[dt];
}

/* Device d's input is block d of `data` (every block has `shape`); the
 * output gets the shape the model gives for it (pmean of integers asks for
 * out_dt). */
static void run_ref(const ref_mesh *m, const ref_call *c, shmesh_dtype dt, int ndim,
                    const int64_t *shape, const void *data, struct res *r)
{
    memset(r, 0, sizeof *r);
    int w = ref_mesh_world(m, r->why, sizeof r->why);
    assert_true(w > 0 && w <= MAXW);
    r->world = w;
    shmesh_array in[MAXW];
    ref_dev devs[MAXW];
    int64_t n = ref_numel(ndim, shape);
    for (int d = 0; d < w; d++) {
        in[d] = (shmesh_array){.data = (char *)data + (size_t)(d * n) * esz(dt), .dtype = dt,
                               .ndim = ndim};
        if (ndim) /* a scalar's shape may be NULL: no memcpy from it, even of nothing */
            memcpy(in[d].shape, shape, sizeof(int64_t) * (size_t)ndim);
    }
    r->rc = ref_out_shape(m, c, &in[0], &r->out[0].dtype, &r->out[0].ndim, r->out[0].shape,
                          r->why, sizeof r->why);
    if (r->rc)
        return;
    int64_t on = ref_numel(r->out[0].ndim, r->out[0].shape);
    for (int d = 0; d < w; d++) {
        r->out[d] = r->out[0];
        r->out[d].data = calloc((size_t)(on ? on : 1), esz(r->out[0].dtype));
        devs[d] = (ref_dev){.in = &in[d], .out = &r->out[d]};
    }
    r->rc = ref_collective(m, c, devs, r->why, sizeof r->why);
}

static void expect_shape(const struct res *r, int ndim, ...)
{
    va_list ap;
    va_start(ap, ndim);
    assert_int_equal(r->out[0].ndim, ndim);
    for (int k = 0; k < ndim; k++)
        assert_int_equal(r->out[0].shape[k], va_arg(ap, int));
    va_end(ap);
}

/* Device d's output holds the int32 values given. */
static void expect_i32(const struct res *r, int d, int count, ...)
{
    assert_int_equal(r->rc, 0);
    assert_int_equal(r->out[d].dtype, SHMESH_INT32);
    assert_int_equal(ref_numel(r->out[d].ndim, r->out[d].shape), count);
    va_list ap;
    va_start(ap, count);
    const int32_t *v = r->out[d].data;
    for (int i = 0; i < count; i++) {
        int want = va_arg(ap, int);
        if (v[i] != want)
            fail_msg("device %d element %d: got %d, expected %d", d, i, v[i], want);
    }
    va_end(ap);
}

static void expect_invalid(const struct res *r, const char *word)
{
    if (r->rc != REF_INVALID)
        fail_msg("expected the call to be refused (%s)", word);
    if (!strstr(r->why, word))
        fail_msg("reason '%s' lacks '%s'", r->why, word);
}

static const ref_mesh mesh4 = {1, names_i, (const int[]){4}, NULL};

static const int arange16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* psum(arange(4), 'i') = [6 6 6 6]; with groups [[0,1],[2,3]]: [1 1 5 5]. */
static void psum_docstring_1d(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PSUM, .axes = "i"};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_shape(&r, 0);
    for (int d = 0; d < 4; d++)
        expect_i32(&r, d, 1, 6);
    res_free(&r);

    shmesh_groups g = {2, 2, (const int[]){0, 1, 2, 3}, NULL};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_i32(&r, 0, 1, 1);
    expect_i32(&r, 1, 1, 1);
    expect_i32(&r, 2, 1, 5);
    expect_i32(&r, 3, 1, 5);
    res_free(&r);

    /* x / psum(x): [0. 0.16666667 0.33333334 0.5] */
    float xf[4] = {0, 1, 2, 3};
    c.groups = NULL;
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, xf, &r);
    assert_int_equal(r.rc, 0);
    for (int d = 0; d < 4; d++) {
        float s = *(float *)r.out[d].data;
        assert_true(s == 6.0f);
        static const float want[4] = {0.0f, 0.16666667f, 0.33333334f, 0.5f};
        assert_true(xf[d] / s == want[d]);
    }
    res_free(&r);
}

/* The 4x4 example: full psum [24 28 32 36] everywhere; groups give
 * [4 6 8 10] twice and [20 22 24 26] twice. */
static void psum_docstring_2d(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PSUM, .axes = "i"};
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_shape(&r, 1, 4);
    for (int d = 0; d < 4; d++)
        expect_i32(&r, d, 4, 24, 28, 32, 36);
    res_free(&r);

    shmesh_groups g = {2, 2, (const int[]){0, 1, 2, 3}, NULL};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_i32(&r, 0, 4, 4, 6, 8, 10);
    expect_i32(&r, 1, 4, 4, 6, 8, 10);
    expect_i32(&r, 2, 4, 20, 22, 24, 26);
    expect_i32(&r, 3, 4, 20, 22, 24, 26);
    res_free(&r);
}

/* pmean(arange(4)) = [1.5 ...]; x / pmean(x) = [0. 0.6666667 1.3333334 2.].
 * Integer input gives float32 (or float64 when asked). */
static void pmean_docstring(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PMEAN, .axes = "i"};
    float xf[4] = {0, 1, 2, 3};
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, xf, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[0].dtype, SHMESH_FLOAT32);
    for (int d = 0; d < 4; d++) {
        float m = *(float *)r.out[d].data;
        assert_true(m == 1.5f);
        static const float want[4] = {0.0f, 0.6666667f, 1.3333334f, 2.0f};
        assert_true(xf[d] / m == want[d]);
    }
    res_free(&r);

    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[0].dtype, SHMESH_FLOAT32);
    assert_true(*(float *)r.out[2].data == 1.5f);
    res_free(&r);

    c.mean_dtype = SHMESH_FLOAT64;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    assert_int_equal(r.out[0].dtype, SHMESH_FLOAT64);
    assert_true(*(double *)r.out[3].data == 1.5);
    res_free(&r);

    /* Uneven subgroups: as in JAX, every subgroup's sum is divided by
     * psum(1, axes, groups), the size of the first subgroup. */
    shmesh_groups g = {2, 0, (const int[]){0, 3, 1, 2}, (const int[]){1, 3}};
    c.groups = &g;
    c.mean_dtype = SHMESH_FLOAT32;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    assert_int_equal(r.rc, 0);
    assert_true(*(float *)r.out[0].data == 0.0f);
    for (int d = 1; d < 4; d++)
        assert_true(*(float *)r.out[d].data == 6.0f);
    res_free(&r);
    shmesh_groups g2 = {2, 0, (const int[]){1, 2, 0, 3}, (const int[]){2, 2}};
    c.groups = &g2;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    assert_true(*(float *)r.out[0].data == 1.5f); /* (0 + 3) / 2 */
    assert_true(*(float *)r.out[1].data == 1.5f); /* (1 + 2) / 2 */
    res_free(&r);
    shmesh_groups g3 = {2, 0, (const int[]){1, 2, 0, 3}, (const int[]){3, 1}};
    c.groups = &g3;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    assert_true(*(float *)r.out[0].data == 1.0f); /* (1 + 2 + 0) / 3 */
    assert_true(*(float *)r.out[3].data == 1.0f); /* 3 / 3 */
    res_free(&r);

    /* float16: the sum is rounded to half, then multiplied by 1/4 (in float,
     * rounded): 2048 + 1 + 1 + 1 = 2051 -> 2052 in half; / 4 = 513. */
    uint16_t h[4] = {float_to_half(2048), float_to_half(1), float_to_half(1), float_to_half(1)};
    c.groups = NULL;
    run_ref(&mesh4, &c, SHMESH_FLOAT16, 0, NULL, h, &r);
    assert_int_equal(r.rc, 0);
    assert_true(half_to_float(*(uint16_t *)r.out[0].data) == 513.0f);
    res_free(&r);
}

/* all_gather(arange(4)) = arange(4) on every device; with groups
 * [[0,2],[3,1]] on the 4x4 example devices 0 and 2 get rows 0 and 2,
 * devices 1 and 3 rows 3 and 1. */
static void all_gather_docstring(void **state)
{
    struct res r;
    ref_call c = {.op = REF_ALL_GATHER, .axes = "i"};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_shape(&r, 1, 4);
    for (int d = 0; d < 4; d++)
        expect_i32(&r, d, 4, 0, 1, 2, 3);
    res_free(&r);

    shmesh_groups g = {2, 2, (const int[]){0, 2, 3, 1}, NULL};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_shape(&r, 2, 2, 4);
    expect_i32(&r, 0, 8, 0, 1, 2, 3, 8, 9, 10, 11);
    expect_i32(&r, 1, 8, 12, 13, 14, 15, 4, 5, 6, 7);
    expect_i32(&r, 2, 8, 0, 1, 2, 3, 8, 9, 10, 11);
    expect_i32(&r, 3, 8, 12, 13, 14, 15, 4, 5, 6, 7);
    res_free(&r);

    /* Stacked at the end (axis -1), and tiled. */
    c.groups = NULL;
    c.axis = -1;
    int x[8] = {0, 1, 10, 11, 20, 21, 30, 31};
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){2}, x, &r);
    expect_shape(&r, 2, 2, 4);
    expect_i32(&r, 1, 8, 0, 10, 20, 30, 1, 11, 21, 31);
    res_free(&r);
    c.tiled = true;
    c.axis = 0;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){2}, x, &r);
    expect_shape(&r, 1, 8);
    expect_i32(&r, 2, 8, 0, 1, 10, 11, 20, 21, 30, 31);
    res_free(&r);
    /* Zero-size dimensions keep their place. */
    run_ref(&mesh4, &c, SHMESH_INT32, 2, (const int64_t[]){0, 3}, x, &r);
    assert_int_equal(r.rc, 0);
    expect_shape(&r, 2, 0, 3);
    res_free(&r);
}

/* psum_scatter on the 4x4 example: untiled [24 28 32 36] (a scalar each),
 * tiled [[24] [28] [32] [36]], groups [[0,2],[3,1]] tiled
 * [[8 10] [20 22] [12 14] [16 18]]. */
static void psum_scatter_docstring(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PSUM_SCATTER, .axes = "i"};
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_shape(&r, 0);
    expect_i32(&r, 0, 1, 24);
    expect_i32(&r, 1, 1, 28);
    expect_i32(&r, 2, 1, 32);
    expect_i32(&r, 3, 1, 36);
    res_free(&r);

    c.tiled = true;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_shape(&r, 1, 1);
    expect_i32(&r, 0, 1, 24);
    expect_i32(&r, 3, 1, 36);
    res_free(&r);

    shmesh_groups g = {2, 2, (const int[]){0, 2, 3, 1}, NULL};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){4}, arange16, &r);
    expect_shape(&r, 1, 2);
    expect_i32(&r, 0, 2, 8, 10);
    expect_i32(&r, 1, 2, 20, 22);
    expect_i32(&r, 2, 2, 12, 14);
    expect_i32(&r, 3, 2, 16, 18);
    res_free(&r);

    /* Not divisible / not equal to the group size. */
    c.groups = NULL;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){3}, arange16, &r);
    expect_invalid(&r, "divisible");
    c.tiled = false;
    run_ref(&mesh4, &c, SHMESH_INT32, 2, (const int64_t[]){2, 2}, arange16, &r);
    expect_invalid(&r, "group size");
    /* bool is summed by psum only. */
    uint8_t b16[16] = {0};
    run_ref(&mesh4, &c, SHMESH_BOOL, 1, (const int64_t[]){4}, b16, &r);
    expect_invalid(&r, "bool");
    /* scatter_dimension -1 of a (2, 4) input: device p keeps column p. */
    c.axis = -1;
    int y[32];
    for (int i = 0; i < 32; i++)
        y[i] = i;
    run_ref(&mesh4, &c, SHMESH_INT32, 2, (const int64_t[]){2, 4}, y, &r);
    expect_shape(&r, 1, 2);
    /* sum[a][b] = sum_d (8d + 4a + b) = 48 + 16a + 4b */
    expect_i32(&r, 1, 2, 52, 68);
    res_free(&r);
}

/* axis_index over one axis of 4 and of 8, and over two axes (4, 2). */
static void axis_index_docstring(void **state)
{
    char why[128];
    int idx, size;
    for (int d = 0; d < 4; d++) {
        assert_int_equal(ref_axis_index(&mesh4, "i", d, &idx, &size, why, sizeof why), 0);
        assert_int_equal(idx, d);
        assert_int_equal(size, 4);
    }
    ref_mesh m8 = {1, names_i, (const int[]){8}, NULL};
    for (int d = 0; d < 8; d++) {
        assert_int_equal(ref_axis_index(&m8, "i", d, &idx, &size, why, sizeof why), 0);
        assert_int_equal(idx, d);
    }
    ref_mesh m42 = {2, names_ij, (const int[]){4, 2}, NULL};
    for (int d = 0; d < 8; d++) {
        ref_axis_index(&m42, "i", d, &idx, &size, why, sizeof why);
        assert_int_equal(idx, d / 2);
        assert_int_equal(size, 4);
        ref_axis_index(&m42, "j", d, &idx, &size, why, sizeof why);
        assert_int_equal(idx, d % 2);
        assert_int_equal(size, 2);
        ref_axis_index(&m42, " i , j ", d, &idx, &size, why, sizeof why);
        assert_int_equal(idx, d);
        ref_axis_index(&m42, "j,i", d, &idx, &size, why, sizeof why);
        assert_int_equal(idx, (d % 2) * 4 + d / 2);
        assert_int_equal(size, 8);
        ref_axis_index(&m42, "", d, &idx, &size, why, sizeof why);
        assert_int_equal(idx, 0);
        assert_int_equal(size, 1);
    }
    /* The header's example: "y,x" on (2, 3) gives j * 2 + i. */
    ref_mesh m23 = {2, names_xy, (const int[]){2, 3}, NULL};
    assert_int_equal(ref_axis_index(&m23, "y,x", 0 * 3 + 2, &idx, &size, why, sizeof why), 0);
    assert_int_equal(idx, 2 * 2 + 0);
    assert_int_equal(size, 6);
    assert_int_equal(ref_axis_index(&m23, "z", 0, &idx, &size, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "unknown"));
    assert_int_equal(ref_axis_index(&m23, "x,x", 0, &idx, &size, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "repeated"));
}

/* device_order moves devices on the mesh; groups follow positions. */
static void device_order_groups(void **state)
{
    ref_mesh m = {2, names_xy, (const int[]){2, 2}, (const int[]){3, 1, 2, 0}};
    char why[128];
    int idx, size;
    ref_axis_index(&m, "x", 3, &idx, &size, why, sizeof why);
    assert_int_equal(idx, 0);
    ref_axis_index(&m, "x", 0, &idx, &size, why, sizeof why);
    assert_int_equal(idx, 1);
    ref_axis_index(&m, "y", 1, &idx, &size, why, sizeof why);
    assert_int_equal(idx, 1);
    struct res r;
    ref_call c = {.op = REF_ALL_GATHER, .axes = "y"};
    int ids[4] = {0, 1, 2, 3};
    run_ref(&m, &c, SHMESH_INT32, 0, NULL, ids, &r);
    expect_i32(&r, 3, 2, 3, 1);
    expect_i32(&r, 1, 2, 3, 1);
    expect_i32(&r, 2, 2, 2, 0);
    expect_i32(&r, 0, 2, 2, 0);
    res_free(&r);
    c.axes = "y,x";
    run_ref(&m, &c, SHMESH_INT32, 0, NULL, ids, &r);
    /* index = y * 2 + x: (0,0)=3, (1,0)=2, (0,1)=1, (1,1)=0 */
    expect_i32(&r, 0, 4, 3, 2, 1, 0);
    res_free(&r);
}

/* The docstring's ragged_all_to_all on an axis of 2. */
static void ragged_docstring(void **state)
{
    ref_mesh m = {1, names_i, (const int[]){2}, NULL};
    int32_t operand[2][3] = {{1, 2, 2}, {3, 4, 0}};
    int32_t output[2][4] = {{0}};
    int32_t in_off[2][2] = {{0, 1}, {0, 1}}, send[2][2] = {{1, 2}, {1, 1}};
    int32_t out_off[2][2] = {{0, 0}, {1, 2}}, recv[2][2] = {{1, 1}, {2, 1}};
    shmesh_array op[2], out[2], a[2], b[2], cc[2], dd[2];
    ref_dev devs[2];
    for (int d = 0; d < 2; d++) {
        op[d] = (shmesh_array){.data = operand[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {3}};
        out[d] = (shmesh_array){.data = output[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {4}};
        a[d] = (shmesh_array){.data = in_off[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        b[d] = (shmesh_array){.data = send[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        cc[d] = (shmesh_array){.data = out_off[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        dd[d] = (shmesh_array){.data = recv[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        devs[d] = (ref_dev){&op[d], &out[d], &a[d], &b[d], &cc[d], &dd[d], 0};
    }
    ref_call c = {.op = REF_RAGGED_ALL_TO_ALL, .axes = "i"};
    char why[256];
    assert_int_equal(ref_collective(&m, &c, devs, why, sizeof why), 0);
    int32_t want[2][4] = {{1, 3, 0, 0}, {2, 2, 4, 0}};
    assert_memory_equal(output, want, sizeof want);

    /* recv_sizes that disagree with the sender, or a slice past the end,
     * are refused and nothing is written. */
    memset(output, 0x55, sizeof output);
    recv[1][0] = 1;
    assert_int_equal(ref_collective(&m, &c, devs, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "expects"));
    recv[1][0] = 2;
    send[0][1] = 3;
    recv[1][0] = 3;
    assert_int_equal(ref_collective(&m, &c, devs, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "outside"));
    for (size_t i = 0; i < sizeof output; i++)
        assert_int_equal(((unsigned char *)output)[i], 0x55);
}

/* A bad ragged slice refuses the call for its group only. */
static void ragged_refusal_is_per_group(void **state)
{
    shmesh_groups g = {2, 2, (const int[]){0, 1, 2, 3}, NULL};
    int32_t operand[4][2], output[4][2];
    int64_t in_off[4][2], send[4][2], out_off[4][2], recv[4][2];
    shmesh_array op[4], out[4], a[4], b[4], cc[4], dd[4];
    ref_dev devs[4];
    for (int d = 0; d < 4; d++) {
        operand[d][0] = 10 * d;
        operand[d][1] = 10 * d + 1;
        output[d][0] = output[d][1] = -1;
        /* row 0 to position 0, row 1 to position 1, landing at my position */
        in_off[d][0] = 0, in_off[d][1] = 1;
        send[d][0] = send[d][1] = recv[d][0] = recv[d][1] = 1;
        out_off[d][0] = out_off[d][1] = d % 2;
        op[d] = (shmesh_array){.data = operand[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        out[d] = (shmesh_array){.data = output[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2}};
        a[d] = (shmesh_array){.data = in_off[d], .dtype = SHMESH_INT64, .ndim = 1, .shape = {2}};
        b[d] = (shmesh_array){.data = send[d], .dtype = SHMESH_INT64, .ndim = 1, .shape = {2}};
        cc[d] = (shmesh_array){.data = out_off[d], .dtype = SHMESH_INT64, .ndim = 1, .shape = {2}};
        dd[d] = (shmesh_array){.data = recv[d], .dtype = SHMESH_INT64, .ndim = 1, .shape = {2}};
        devs[d] = (ref_dev){&op[d], &out[d], &a[d], &b[d], &cc[d], &dd[d], 0};
    }
    ref_call c = {.op = REF_RAGGED_ALL_TO_ALL, .axes = "i", .groups = &g};
    char why[256];
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), 0);
    int32_t want[4][2] = {{0, 10}, {1, 11}, {20, 30}, {21, 31}};
    assert_memory_equal(output, want, sizeof want);

    for (int d = 0; d < 4; d++)
        output[d][0] = output[d][1] = -1;
    send[3][0] = 2; /* device 3 sends two rows to device 2, which expects one */
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "device 3 entry 0"));
    assert_int_equal(devs[0].rc, 0);
    assert_int_equal(devs[1].rc, 0);
    assert_int_equal(devs[2].rc, REF_INVALID);
    assert_int_equal(devs[3].rc, REF_INVALID);
    int32_t want2[4][2] = {{0, 10}, {1, 11}, {-1, -1}, {-1, -1}};
    assert_memory_equal(output, want2, sizeof want2);
}

/* NaN wins pmax/pmin; pargmax picks the smallest index holding the max,
 * INT32_MAX where the max is NaN. */
static void max_min_argmax(void **state)
{
    float x[4][3] = {{1, 5, 2}, {3, 5, NAN}, {3, -1, 0}, {0, 5, 7}};
    struct res r;
    ref_call c = {.op = REF_PMAX, .axes = "i"};
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 1, (const int64_t[]){3}, x, &r);
    float *o = r.out[1].data;
    assert_true(o[0] == 3 && o[1] == 5 && isnan(o[2]));
    res_free(&r);
    c.op = REF_PMIN;
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 1, (const int64_t[]){3}, x, &r);
    o = r.out[0].data;
    assert_true(o[0] == 0 && o[1] == -1 && isnan(o[2]));
    res_free(&r);
    c.op = REF_PARGMAX;
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 1, (const int64_t[]){3}, x, &r);
    for (int d = 0; d < 4; d++)
        expect_i32(&r, d, 3, 1, 0, INT32_MAX);
    res_free(&r);
    c.op = REF_PARGMIN;
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 1, (const int64_t[]){3}, x, &r);
    expect_i32(&r, 2, 3, 3, 2, INT32_MAX);
    res_free(&r);

    /* Integers compare by sign; bool max is or, min is and. */
    int8_t s[4] = {-128, 127, -1, 0};
    c.op = REF_PMAX;
    run_ref(&mesh4, &c, SHMESH_INT8, 0, NULL, s, &r);
    assert_int_equal(*(int8_t *)r.out[0].data, 127);
    res_free(&r);
    uint8_t u[4] = {200, 1, 255, 0};
    c.op = REF_PMIN;
    run_ref(&mesh4, &c, SHMESH_UINT8, 0, NULL, u, &r);
    assert_int_equal(*(uint8_t *)r.out[0].data, 0);
    res_free(&r);
    c.op = REF_PARGMAX;
    run_ref(&mesh4, &c, SHMESH_UINT8, 0, NULL, u, &r);
    expect_i32(&r, 0, 1, 2);
    res_free(&r);
    uint8_t b[4][2] = {{0, 1}, {1, 1}, {0, 1}, {0, 0}};
    c.op = REF_PMAX;
    run_ref(&mesh4, &c, SHMESH_BOOL, 1, (const int64_t[]){2}, b, &r);
    assert_int_equal(((uint8_t *)r.out[3].data)[0], 1);
    assert_int_equal(((uint8_t *)r.out[3].data)[1], 1);
    res_free(&r);
    c.op = REF_PMIN;
    run_ref(&mesh4, &c, SHMESH_BOOL, 1, (const int64_t[]){2}, b, &r);
    assert_int_equal(((uint8_t *)r.out[3].data)[0], 0);
    assert_int_equal(((uint8_t *)r.out[3].data)[1], 0);
    res_free(&r);

    /* pargmax: one axis, no groups. */
    ref_mesh m22 = {2, names_xy, (const int[]){2, 2}, NULL};
    c.op = REF_PARGMAX;
    c.axes = "x,y";
    run_ref(&m22, &c, SHMESH_UINT8, 0, NULL, u, &r);
    expect_invalid(&r, "one axis");
    c.axes = "i";
    shmesh_groups g = {2, 2, (const int[]){0, 1, 2, 3}, NULL};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_UINT8, 0, NULL, u, &r);
    expect_invalid(&r, "axis_index_groups");
}

/* bool sums into int32, integers wrap, float16 accumulates in float32 and
 * rounds once, and floats are added in group order (subgroup list order). */
static void sum_types_and_order(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PSUM, .axes = "i"};
    uint8_t b[4] = {1, 0, 1, 1};
    run_ref(&mesh4, &c, SHMESH_BOOL, 0, NULL, b, &r);
    expect_i32(&r, 0, 1, 3);
    res_free(&r);

    int8_t s[4] = {100, 100, 0, 0};
    run_ref(&mesh4, &c, SHMESH_INT8, 0, NULL, s, &r);
    assert_int_equal(*(int8_t *)r.out[0].data, -56);
    res_free(&r);
    c.op = REF_PMEAN;
    run_ref(&mesh4, &c, SHMESH_INT8, 0, NULL, s, &r);
    assert_true(*(float *)r.out[0].data == -14.0f); /* wrapped -56 / 4 */
    res_free(&r);
    uint64_t big[4] = {UINT64_MAX, 2, 0, 0};
    c.op = REF_PSUM;
    run_ref(&mesh4, &c, SHMESH_UINT64, 0, NULL, big, &r);
    assert_true(*(uint64_t *)r.out[0].data == 1);
    res_free(&r);

    /* 2048 + 1 + 1 + 1: stepwise in half it stays 2048; in float32 it is
     * 2051, which rounds (to even) to 2052 in half. */
    uint16_t h[4] = {float_to_half(2048), float_to_half(1), float_to_half(1), float_to_half(1)};
    run_ref(&mesh4, &c, SHMESH_FLOAT16, 0, NULL, h, &r);
    assert_true(half_to_float(*(uint16_t *)r.out[0].data) == 2052.0f);
    res_free(&r);
    uint16_t bf[4] = {float_to_bf16(256), float_to_bf16(1), float_to_bf16(1), float_to_bf16(0)};
    run_ref(&mesh4, &c, SHMESH_BFLOAT16, 0, NULL, bf, &r);
    assert_true(bf16_to_float(*(uint16_t *)r.out[0].data) == 258.0f);
    res_free(&r);

    /* 1 + 1e8 - 1e8 = 0 in float32, (1e8 - 1e8) + 1 = 1: the subgroup's list
     * order decides. */
    float f[4] = {1.0f, 1e8f, -1e8f, 0.0f};
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, f, &r);
    assert_true(*(float *)r.out[0].data == 0.0f);
    res_free(&r);
    shmesh_groups g = {2, 0, (const int[]){1, 2, 0, 3}, (const int[]){3, 1}};
    c.groups = &g;
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, f, &r);
    assert_int_equal(r.rc, 0);
    for (int d = 0; d < 3; d++)
        assert_true(*(float *)r.out[d].data == 1.0f);
    assert_true(*(float *)r.out[3].data == 0.0f);
    res_free(&r);
}

/* all_to_all layouts on two devices, x_j[a][b] = 100 j + 10 a + b. */
static void all_to_all_layouts(void **state)
{
    ref_mesh m = {1, names_i, (const int[]){2}, NULL};
    int x[2][2][4];
    for (int j = 0; j < 2; j++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 4; b++)
                x[j][a][b] = 100 * j + 10 * a + b;
    int x3[2][2][3];
    for (int j = 0; j < 2; j++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                x3[j][a][b] = 100 * j + 10 * a + b;
    struct res r;
    /* split 0, concat 0: out_p[j][b] = x_j[p][b] */
    ref_call c = {.op = REF_ALL_TO_ALL, .axes = "i", .axis = 0, .concat_axis = 0};
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 3}, x3, &r);
    expect_shape(&r, 2, 2, 3);
    expect_i32(&r, 0, 6, 0, 1, 2, 100, 101, 102);
    expect_i32(&r, 1, 6, 10, 11, 12, 110, 111, 112);
    res_free(&r);
    /* split 0, concat 1 (= -1): out_p[b][j] = x_j[p][b] */
    c.concat_axis = -1;
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 3}, x3, &r);
    expect_shape(&r, 2, 3, 2);
    expect_i32(&r, 0, 6, 0, 100, 1, 101, 2, 102);
    res_free(&r);
    /* tiled, split 1, concat 0: block p of columns, stacked by sender */
    c = (ref_call){.op = REF_ALL_TO_ALL, .axes = "i", .axis = 1, .concat_axis = 0,
                   .tiled = true};
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 4}, x, &r);
    expect_shape(&r, 2, 4, 2);
    expect_i32(&r, 0, 8, 0, 1, 10, 11, 100, 101, 110, 111);
    expect_i32(&r, 1, 8, 2, 3, 12, 13, 102, 103, 112, 113);
    res_free(&r);
    /* tiled, split = concat = 1 */
    c.concat_axis = 1;
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 4}, x, &r);
    expect_shape(&r, 2, 2, 4);
    expect_i32(&r, 1, 8, 2, 3, 102, 103, 12, 13, 112, 113);
    res_free(&r);
    /* untiled split 1 of 4 on 2 devices is refused; tiled split 1 of 3 too */
    c.tiled = false;
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 4}, x, &r);
    expect_invalid(&r, "group size");
    c.tiled = true;
    run_ref(&m, &c, SHMESH_INT32, 2, (const int64_t[]){2, 3}, x, &r);
    expect_invalid(&r, "divisible");
    /* pswapaxes: out_p[j] = x_j[p] */
    int v[2][2] = {{0, 1}, {10, 11}};
    c = (ref_call){.op = REF_PSWAPAXES, .axes = "i", .axis = -1};
    run_ref(&m, &c, SHMESH_INT32, 1, (const int64_t[]){2}, v, &r);
    expect_i32(&r, 0, 2, 0, 10);
    expect_i32(&r, 1, 2, 1, 11);
    res_free(&r);
}

static void permutations(void **state)
{
    int x[4] = {10, 11, 12, 13};
    struct res r;
    ref_call c = {.op = REF_PPERMUTE, .axes = "i",
                  .pairs = (const int[][2]){{0, 1}, {1, 2}, {2, 3}}, .npairs = 3};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_i32(&r, 0, 1, 0);
    expect_i32(&r, 1, 1, 10);
    expect_i32(&r, 3, 1, 12);
    res_free(&r);
    /* Indices are reduced modulo n as in Python: -1 is 3, 5 is 1. */
    c.pairs = (const int[][2]){{-1, 0}, {5, 6}};
    c.npairs = 2;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_i32(&r, 0, 1, 13);
    expect_i32(&r, 2, 1, 11);
    expect_i32(&r, 1, 1, 0);
    res_free(&r);
    c.pairs = (const int[][2]){{0, 1}, {2, 5}};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_invalid(&r, "destination");
    c.pairs = (const int[][2]){{0, 1}, {4, 2}};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_invalid(&r, "source");

    c = (ref_call){.op = REF_PSHUFFLE, .axes = "i", .perm = (const int[]){2, 0, 3, 1}};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_i32(&r, 0, 1, 12);
    expect_i32(&r, 1, 1, 10);
    expect_i32(&r, 2, 1, 13);
    expect_i32(&r, 3, 1, 11);
    res_free(&r);
    c.perm = (const int[]){2, 0, 2, 1};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_invalid(&r, "twice");

    c = (ref_call){.op = REF_PBROADCAST, .axes = "i", .source = 2};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    for (int d = 0; d < 4; d++)
        expect_i32(&r, d, 1, 12);
    res_free(&r);
    c.source = 4;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, x, &r);
    expect_invalid(&r, "source");
}

static void refused_arguments(void **state)
{
    struct res r;
    ref_call c = {.op = REF_PSUM, .axes = "k"};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "unknown");
    c.axes = "i,";
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "empty");
    c.axes = "i";
    shmesh_groups dup = {2, 2, (const int[]){0, 1, 1, 3}, NULL};
    c.groups = &dup;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "repeated");
    shmesh_groups few = {1, 3, (const int[]){0, 1, 2}, NULL};
    c.groups = &few;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "indices");
    /* Uneven subgroups: fine for psum, refused for all_gather. */
    shmesh_groups uneven = {2, 0, (const int[]){0, 1, 2, 3}, (const int[]){1, 3}};
    c.groups = &uneven;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_i32(&r, 0, 1, 0);
    expect_i32(&r, 3, 1, 6);
    res_free(&r);
    c.op = REF_ALL_GATHER;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "one size");
    /* Axis out of range; tiled gather of a scalar. */
    c.groups = NULL;
    c.axis = 2;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){2}, arange16, &r);
    expect_invalid(&r, "out of range");
    c.axis = -2;
    run_ref(&mesh4, &c, SHMESH_INT32, 1, (const int64_t[]){2}, arange16, &r);
    assert_int_equal(r.rc, 0);
    expect_shape(&r, 2, 4, 2);
    res_free(&r);
    c.axis = 0;
    c.tiled = true;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, arange16, &r);
    expect_invalid(&r, "out of range");

    /* A wrong output shape or dtype is refused by ref_collective. */
    shmesh_array in[4], out[4];
    ref_dev devs[4];
    int32_t o[4][4];
    for (int d = 0; d < 4; d++) {
        in[d] = (shmesh_array){.data = (void *)&arange16[d], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
        out[d] = (shmesh_array){.data = o[d], .dtype = SHMESH_INT32, .ndim = 1, .shape = {3}};
        devs[d] = (ref_dev){.in = &in[d], .out = &out[d]};
    }
    char why[256];
    c = (ref_call){.op = REF_ALL_GATHER, .axes = "i"};
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), REF_INVALID);
    assert_non_null(strstr(why, "output must be"));
    for (int d = 0; d < 4; d++)
        out[d].shape[0] = 4;
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), 0);
    c.op = REF_PMEAN;
    for (int d = 0; d < 4; d++)
        out[d] = (shmesh_array){.data = o[d], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), REF_INVALID);
    for (int d = 0; d < 4; d++)
        out[d].dtype = SHMESH_FLOAT64;
    assert_int_equal(ref_collective(&mesh4, &c, devs, why, sizeof why), 0);
    double m1;
    memcpy(&m1, o[1], sizeof m1);
    assert_true(m1 == 1.5);
    /* Bad meshes. */
    ref_mesh bad = {2, names_xy, (const int[]){2, 2}, (const int[]){0, 1, 1, 3}};
    assert_int_equal(ref_mesh_world(&bad, why, sizeof why), REF_INVALID);
    ref_mesh same = {2, (const char *const[]){"a", "a"}, (const int[]){2, 2}, NULL};
    assert_int_equal(ref_mesh_world(&same, why, sizeof why), REF_INVALID);
}

/* JAX's floating sums start from +0.0: a sum of nothing but -0.0 is +0.0
 * (psum, psum_scatter and pmean alike; a subgroup of one too). */
static void sums_of_negative_zero(void **state)
{
    struct res r;
    shmesh_groups g = {2, 0, (const int[]){0, 1, 2, 3}, (const int[]){3, 1}};
    ref_call c = {.op = REF_PSUM, .axes = "i", .groups = &g};
    float f[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
    double d[4] = {-0.0, -0.0, 0.0, -0.0};
    uint16_t h[4] = {0x8000, 0x8000, 0x8000, 0x8000};
    static const ref_op ops[] = {REF_PSUM, REF_PMEAN};
    for (size_t k = 0; k < 2; k++) {
        c.op = ops[k];
        run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, f, &r);
        assert_int_equal(r.rc, 0);
        for (int dv = 0; dv < 4; dv++)
            assert_int_equal(*(uint32_t *)r.out[dv].data, 0);
        res_free(&r);
        run_ref(&mesh4, &c, SHMESH_FLOAT64, 0, NULL, d, &r);
        for (int dv = 0; dv < 4; dv++)
            assert_true(*(uint64_t *)r.out[dv].data == 0);
        res_free(&r);
        run_ref(&mesh4, &c, SHMESH_FLOAT16, 0, NULL, h, &r);
        assert_int_equal(*(uint16_t *)r.out[3].data, 0);
        res_free(&r);
        run_ref(&mesh4, &c, SHMESH_BFLOAT16, 0, NULL, h, &r);
        assert_int_equal(*(uint16_t *)r.out[0].data, 0);
        res_free(&r);
    }
    c = (ref_call){.op = REF_PSUM_SCATTER, .axes = "i", .tiled = true};
    float f16[16];
    for (int k = 0; k < 16; k++)
        f16[k] = -0.0f;
    int64_t shape[1] = {4};
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 1, shape, f16, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(*(uint32_t *)r.out[2].data, 0);
    res_free(&r);
}

/* pmean over groups whose size is no power of two: JAX's psum(x) / n is
 * psum(x) * (1/n) after XLA's simplifier, the reciprocal rounded in the
 * output dtype, which differs from dividing (the golden data of JAX 0.11
 * show it for float32, int32 and uint32). */
static void pmean_multiplies_by_the_reciprocal(void **state)
{
    struct res r;
    /* subgroups [0, 1, 2] and [3]: every sum is scaled by 1/3 */
    shmesh_groups g = {2, 0, (const int[]){0, 1, 2, 3}, (const int[]){3, 1}};
    ref_call c = {.op = REF_PMEAN, .axes = "i", .groups = &g,
                  .mean_dtype = SHMESH_FLOAT32};
    float f[4] = {2, 2, 1, 23};
    run_ref(&mesh4, &c, SHMESH_FLOAT32, 0, NULL, f, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(*(uint32_t *)r.out[0].data, 0x3fd55556); /* 5 / 3: ...55 */
    assert_int_equal(*(uint32_t *)r.out[3].data, 0x40f55556); /* 23 / 3: ...55 */
    res_free(&r);
    double d[4] = {2, 2, 1, 0};
    run_ref(&mesh4, &c, SHMESH_FLOAT64, 0, NULL, d, &r);
    assert_true(*(uint64_t *)r.out[1].data == UINT64_C(0x3ffaaaaaaaaaaaaa)); /* ...ab */
    res_free(&r);
    uint16_t h[4] = {float_to_half(1), float_to_half(0.25f), 0, 0};
    run_ref(&mesh4, &c, SHMESH_FLOAT16, 0, NULL, h, &r);
    assert_int_equal(*(uint16_t *)r.out[2].data, 0x36aa); /* 1.25 / 3: 0x36ab */
    res_free(&r);
    uint16_t b[4] = {float_to_bf16(1), float_to_bf16(0.25f), 0, 0};
    run_ref(&mesh4, &c, SHMESH_BFLOAT16, 0, NULL, b, &r);
    assert_int_equal(*(uint16_t *)r.out[2].data, 0x3ed6); /* 1.25 / 3: 0x3ed5 */
    res_free(&r);
    /* integers: the sum converted to the output dtype, then multiplied */
    int32_t i[4] = {10, 6, 7, 5};
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, i, &r);
    assert_int_equal(*(uint32_t *)r.out[0].data, 0x40f55556); /* 23 / 3 */
    assert_int_equal(*(uint32_t *)r.out[3].data, 0x3fd55556); /* 5 / 3 */
    res_free(&r);
    c.mean_dtype = SHMESH_FLOAT64;
    run_ref(&mesh4, &c, SHMESH_INT32, 0, NULL, i, &r);
    assert_true(*(uint64_t *)r.out[3].data == UINT64_C(0x3ffaaaaaaaaaaaaa)); /* 5 / 3 */
    res_free(&r);
}

/* The model's ops are the MESH lines of the library's op table, with the
 * table's names, and the model runs every one of them. */
static void ops_come_from_the_op_table(void **state)
{
#define COUNT_MESH(ID, name, scope, ...) +REF_SCOPE_##scope(1)
    assert_int_equal(REF_OP_COUNT, 0 SHMESH_OPS(COUNT_MESH));
#undef COUNT_MESH
    assert_int_equal(REF_PSUM, 0);
    assert_string_equal(ref_op_name(REF_PSUM), "psum");
    assert_string_equal(ref_op_name(REF_RAGGED_ALL_TO_ALL), "ragged_all_to_all");
    assert_string_equal(ref_op_name(REF_OP_COUNT), "?");
    assert_int_equal(ref_op_by_name("barrier"), -1);
    assert_int_equal(ref_op_by_name("world_sum"), -1);
    assert_int_equal(ref_op_by_name("nonsense"), -1);
    for (int op = 0; op < REF_OP_COUNT; op++) {
        const char *name = ref_op_name((ref_op)op);
        assert_non_null(name);
        assert_int_equal(ref_op_by_name(name), op);
        /* Known to the model: a refusal, if any, is about the arguments. */
        ref_call c = {.op = (ref_op)op, .axes = "i"};
        shmesh_array in = {.data = NULL, .dtype = SHMESH_INT32, .ndim = 1, .shape = {4}};
        shmesh_dtype dt;
        int nd;
        int64_t shape[SHMESH_MAX_NDIM];
        char why[256] = "";
        ref_out_shape(&mesh4, &c, &in, &dt, &nd, shape, why, sizeof why);
        if (strstr(why, "unknown op"))
            fail_msg("the model does not run %s: %s", name, why);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(psum_docstring_1d),
        cmocka_unit_test(psum_docstring_2d),
        cmocka_unit_test(pmean_docstring),
        cmocka_unit_test(all_gather_docstring),
        cmocka_unit_test(psum_scatter_docstring),
        cmocka_unit_test(axis_index_docstring),
        cmocka_unit_test(device_order_groups),
        cmocka_unit_test(ragged_docstring),
        cmocka_unit_test(ragged_refusal_is_per_group),
        cmocka_unit_test(max_min_argmax),
        cmocka_unit_test(sum_types_and_order),
        cmocka_unit_test(sums_of_negative_zero),
        cmocka_unit_test(pmean_multiplies_by_the_reciprocal),
        cmocka_unit_test(all_to_all_layouts),
        cmocka_unit_test(permutations),
        cmocka_unit_test(refused_arguments),
        cmocka_unit_test(ops_come_from_the_op_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
