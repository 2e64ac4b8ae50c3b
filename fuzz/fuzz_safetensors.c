/*
 * fuzz/fuzz_safetensors.c - safetensors headers, as `dvar import` reads
 * them: what is accepted lists tensors of dtypes dvar has, whose bytes are
 * their shapes', inside the file's data and not overlapping, in order.
 */
#include "fuzz.h"
#include "restore/restore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = fuzz_file(data, size);
	dvar_st_tensor *t = NULL;
	size_t n = 0;

	if (fd < 0)
		return 0;
	if (dvar_st_read_header(fd, "fuzz", size, &t, &n) == DVAR_OK) {
		uint64_t end = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t bytes;
			FUZZ_CHECK(dvar_dtype_size(t[i].dtype) > 0 && t[i].name && t[i].name[0]);
			FUZZ_CHECK(dvar_shape_num_bytes(&t[i].shape, t[i].dtype, &bytes) == DVAR_OK &&
			           bytes == t[i].bytes);
			FUZZ_CHECK(t[i].offset <= size && t[i].bytes <= size - t[i].offset);
			FUZZ_CHECK(t[i].offset >= end);
			end = t[i].offset + t[i].bytes;
		}
		dvar_st_tensors_free(t, n);
	}
	close(fd);
	dvar_error_clear();
	return 0;
}
