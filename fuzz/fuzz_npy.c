/*
 * fuzz/fuzz_npy.c - .npy headers, as `dvar import` reads them: what parses
 * describes data that lies inside the file, of a dtype dvar has, in a
 * shape whose bytes are the data's.
 */
#include "fuzz.h"
#include "restore/restore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dvar_npy_info in;
	uint64_t bytes;
	size_t len = size < DVAR_NPY_READ_MAX ? size : DVAR_NPY_READ_MAX;

	if (dvar_npy_parse("fuzz", data, len, size, &in) != DVAR_OK) {
		dvar_error_clear();
		return 0;
	}
	FUZZ_CHECK(dvar_dtype_size(in.dtype) > 0);
	FUZZ_CHECK(dvar_shape_num_bytes(&in.shape, in.dtype, &bytes) == DVAR_OK && bytes == in.bytes);
	FUZZ_CHECK(in.offset <= size && in.bytes <= size - in.offset);
	FUZZ_CHECK(in.offset + in.bytes + in.trailing == size);
	return 0;
}
