/*
 * tests/headertest.h - what the C and C++ header tests both check: every
 * options struct's positional _INIT macro and its _init function (the
 * file is valid C11 and C++, and compiled as both).
 */
#ifndef DVAR_HEADERTEST_H
#define DVAR_HEADERTEST_H

#include "dvar/dvar.h"

/* An options struct's _INIT macro and its _init function give the same
 * version, and the function refuses a version from the future. */
#define CHECK_OPTIONS(type, macro, fn, current)                                          \
	do {                                                                             \
		type a_ = macro, b_;                                                     \
		bad += a_.version != (current) || fn(&b_, current) != DVAR_OK ||         \
		       b_.version != (current) || fn(&b_, (current) + 1) != DVAR_EINVAL; \
	} while (0)

static int check_options(void)
{
	int bad = 0;

	CHECK_OPTIONS(dvar_write_options, DVAR_WRITE_OPTIONS_INIT, dvar_write_options_init,
	              DVAR_WRITE_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_read_options, DVAR_READ_OPTIONS_INIT, dvar_read_options_init,
	              DVAR_READ_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_input_options, DVAR_INPUT_OPTIONS_INIT, dvar_input_options_init,
	              DVAR_INPUT_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_strategy_options, DVAR_STRATEGY_OPTIONS_INIT,
	              dvar_strategy_options_init, DVAR_STRATEGY_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_variable_spec, DVAR_VARIABLE_SPEC_INIT, dvar_variable_spec_init,
	              DVAR_VARIABLE_SPEC_VERSION);
	CHECK_OPTIONS(dvar_sharded_variable_spec, DVAR_SHARDED_VARIABLE_SPEC_INIT,
	              dvar_sharded_variable_spec_init, DVAR_SHARDED_VARIABLE_SPEC_VERSION);
	CHECK_OPTIONS(dvar_save_options, DVAR_SAVE_OPTIONS_INIT, dvar_save_options_init,
	              DVAR_SAVE_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_manager_options, DVAR_MANAGER_OPTIONS_INIT, dvar_manager_options_init,
	              DVAR_MANAGER_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_restore_options, DVAR_RESTORE_OPTIONS_INIT, dvar_restore_options_init,
	              DVAR_RESTORE_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_reshard_options, DVAR_RESHARD_OPTIONS_INIT, dvar_reshard_options_init,
	              DVAR_RESHARD_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_export_options, DVAR_EXPORT_OPTIONS_INIT, dvar_export_options_init,
	              DVAR_EXPORT_OPTIONS_VERSION);
	CHECK_OPTIONS(dvar_import_options, DVAR_IMPORT_OPTIONS_INIT, dvar_import_options_init,
	              DVAR_IMPORT_OPTIONS_VERSION);
	{
		dvar_import_options a = DVAR_IMPORT_OPTIONS_INIT, b;
		bad += dvar_import_options_init(&b, DVAR_IMPORT_OPTIONS_VERSION) != DVAR_OK ||
		       a.step != -1 || b.step != -1 || a.keep_last != 0 || b.chunk_size != 0;
	}
	CHECK_OPTIONS(dvar_diff_options, DVAR_DIFF_OPTIONS_INIT, dvar_diff_options_init,
	              DVAR_DIFF_OPTIONS_VERSION);
	{
		dvar_diff_options a = DVAR_DIFF_OPTIONS_INIT, b;
		bad += dvar_diff_options_init(&b, DVAR_DIFF_OPTIONS_VERSION) != DVAR_OK ||
		       a.atol >= 0 || a.rtol >= 0 || b.atol >= 0 || b.rtol >= 0 || b.flags != 0;
	}
	{
		dvar_partitioner f = DVAR_PARTITIONER_FIXED_INIT(3);
		dvar_partitioner mn = DVAR_PARTITIONER_MIN_SIZE_INIT;
		dvar_partitioner mx = DVAR_PARTITIONER_MAX_SIZE_INIT(1024);
		bad += f.kind != DVAR_PARTITIONER_FIXED || f.num_shards != 3;
		bad += mn.kind != DVAR_PARTITIONER_MIN_SIZE || mn.min_shard_bytes != 256 << 10 ||
		       mn.max_shards != 1 || mn.bytes_per_string != 16;
		bad += mx.kind != DVAR_PARTITIONER_MAX_SIZE || mx.max_shard_bytes != 1024 ||
		       mx.max_shards != 0 || mx.bytes_per_string != 16;
	}
	return bad;
}

#endif
