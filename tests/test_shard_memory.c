/* Description: the memory of global arrays' owned shards
 * (lib/arrays/shard_memory.c): large shards aligned for huge pages, and
 * the few freed large shards a process keeps for the next of their size,
 * within SHMESH_ARRAY_CACHE's budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "arrays/shard_memory.h"

#define MIB ((size_t)1 << 20)

static int reset(void **state)
{
    (void)state;
    shard_memory_release();
    shard_memory_budget(1024 * MIB);
    return 0;
}

/* A freed large shard is kept and handed out again, whole, for its size
 * only; small ones are never kept. */
static void kept_for_the_same_size(void **state)
{
    (void)state;
    unsigned char *p = shard_alloc(4 * MIB);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % (2 * MIB), 0); /* huge-page aligned */
    memset(p, 0x5a, 4 * MIB);
    shard_free(p, 4 * MIB);
    assert_int_equal(shard_memory_kept(), 4 * MIB);
    unsigned char *other = shard_alloc(6 * MIB); /* another size: new memory */
    assert_non_null(other);
    assert_ptr_not_equal(other, p);
    assert_int_equal(shard_memory_kept(), 4 * MIB);
    unsigned char *q = shard_alloc(4 * MIB);
    assert_ptr_equal(q, p);
    assert_int_equal(q[0], 0x5a);
    assert_int_equal(q[4 * MIB - 1], 0x5a);
    assert_int_equal(shard_memory_kept(), 0);
    unsigned char *small = shard_alloc(64 * 1024);
    assert_non_null(small);
    assert_int_equal((uintptr_t)small % 64, 0);
    shard_free(small, 64 * 1024);
    assert_int_equal(shard_memory_kept(), 0);
    shard_free(q, 4 * MIB);
    shard_free(other, 6 * MIB);
    assert_int_equal(shard_memory_kept(), 10 * MIB);
    shard_memory_release();
    assert_int_equal(shard_memory_kept(), 0);
}

/* Never more than the budget's bytes nor SHARD_CACHE_BUFFERS buffers. */
static void within_the_budget(void **state)
{
    (void)state;
    shard_memory_budget(9 * MIB);
    void *p[6];
    for (int i = 0; i < 6; i++)
        assert_non_null(p[i] = shard_alloc(4 * MIB));
    for (int i = 0; i < 6; i++)
        shard_free(p[i], 4 * MIB);
    assert_int_equal(shard_memory_kept(), 8 * MIB);
    shard_memory_release();
    shard_memory_budget(1024 * MIB);
    for (int i = 0; i < 6; i++)
        assert_non_null(p[i] = shard_alloc(4 * MIB));
    for (int i = 0; i < 6; i++)
        shard_free(p[i], 4 * MIB);
    assert_int_equal(shard_memory_kept(), SHARD_CACHE_BUFFERS * 4 * MIB);
    shard_memory_release();
    shard_memory_budget(0); /* SHMESH_ARRAY_CACHE=0 */
    assert_non_null(p[0] = shard_alloc(4 * MIB));
    shard_free(p[0], 4 * MIB);
    assert_int_equal(shard_memory_kept(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(kept_for_the_same_size, reset),
        cmocka_unit_test_setup(within_the_budget, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
