/*
 * tests/unit/core/test_core_abi.c - dvar_abi_sizeof, which bindings check
 * their mirrored struct layouts against: every public struct a binding may
 * mirror has its header's size, and unknown names are 0.
 */
#include <string.h>

#include "testutil.h"
#include "dvar/format.h"
#include "dvar/restore.h"

static void test_core_abi__sizes(void **state)
{
	(void)state;
#define CHECK(t) assert_int_equal(dvar_abi_sizeof(#t), sizeof(t))
	CHECK(dvar_error);
	CHECK(dvar_shape);
	CHECK(dvar_slice);
	CHECK(dvar_slice_walk);
	CHECK(dvar_write_options);
	CHECK(dvar_read_options);
	CHECK(dvar_var_info);
	CHECK(dvar_mapping);
	CHECK(dvar_bad_chunk);
	CHECK(dvar_root_entry);
	CHECK(dvar_callbacks);
	CHECK(dvar_shard_count);
	CHECK(dvar_reshard_options);
	CHECK(dvar_export_options);
	CHECK(dvar_import_source);
	CHECK(dvar_import_options);
	CHECK(dvar_read_request);
	CHECK(dvar_diff_options);
	CHECK(dvar_var_diff);
#undef CHECK
	/* What a ctypes mirror computes on x86-64 / aarch64 Linux (LP64). */
	if (sizeof(void *) == 8) {
		assert_int_equal(dvar_abi_sizeof("dvar_shape"), 4 + 4 + 8 * 8);
		assert_int_equal(dvar_abi_sizeof("dvar_slice"), 4 + 4 + 2 * 8 * 8);
		assert_int_equal(dvar_abi_sizeof("dvar_mapping"), 4 * 8);
		assert_int_equal(dvar_abi_sizeof("dvar_read_request"), 4 * 8);
	}
}

static void test_core_abi__unknown(void **state)
{
	(void)state;
	assert_int_equal(dvar_abi_sizeof(NULL), 0);
	assert_int_equal(dvar_abi_sizeof(""), 0);
	assert_int_equal(dvar_abi_sizeof("dvar_nothing"), 0);
	assert_int_equal(dvar_abi_sizeof("dvar_shape "), 0); /* exact names only */
	assert_int_equal(dvar_abi_sizeof("DVAR_SHAPE"), 0);
	assert_int_equal(dvar_abi_sizeof("dvar_reader"), 0); /* opaque: nothing to mirror */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_abi__sizes),
		cmocka_unit_test(test_core_abi__unknown),
	};
	return cmocka_run_group_tests_name("core/abi", tests, NULL, NULL);
}
