/*
 * fuzz/fuzz_zip.c - .npz archives (zip, ZIP64, stored and deflated
 * members): the central directory, then every member read to its end, in
 * bounded pieces. A member that reads to its end produced exactly the
 * bytes its directory entry promised (its CRC-32 is checked there).
 */
#include "fuzz.h"
#include "restore/restore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = fuzz_file(data, size);
	dvar_zip_member *m = NULL;
	size_t n = 0;
	unsigned char buf[4096];

	if (fd < 0)
		return 0;
	if (dvar_zip_list(fd, "fuzz", size, &m, &n) == DVAR_OK) {
		for (size_t i = 0; i < n && i < 8; i++) {
			dvar_zip_stream *s = NULL;
			uint64_t got = 0;
			int rc = DVAR_OK;
			if (m[i].usize > (64u << 20) || dvar_zip_open(&s, fd, "fuzz", size, &m[i]) != DVAR_OK)
				continue;
			while (got < m[i].usize && rc == DVAR_OK) {
				size_t want = m[i].usize - got < sizeof buf ? (size_t)(m[i].usize - got) : sizeof buf;
				if ((rc = dvar_zip_read(s, buf, want)) == DVAR_OK)
					got += want;
			}
			FUZZ_CHECK(rc != DVAR_OK || got == m[i].usize);
			dvar_zip_close(s);
		}
		dvar_zip_members_free(m, n);
	}
	close(fd);
	dvar_error_clear();
	return 0;
}
