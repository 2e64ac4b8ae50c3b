/*
 * format/delta.c - what a delta checkpoint needs beyond its own index: the
 * header and index checksum of another checkpoint of the same directory
 * (a link of its chain), and the chain a new delta over a base records.
 * The reader follows the chain (reader.c), the writer records it
 * (writer.c), retention keeps what a kept delta needs (root.c).
 */
#include <stdlib.h>
#include <string.h>

#include "format/format.h"

/* Stops the scan at the header: the rest of the index is not needed. */
#define STOP 1

static int take_header(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	dvar_header *h = ud;
	int rc;
	if (klen != 0)
		return dvar_error_set(DVAR_ECORRUPT, "index has no header entry: not a dvar checkpoint");
	rc = dvar_header_decode(h, val, vlen);
	return rc ? rc : STOP;
}

int dvar_link_peek(const char *dir, dvar_header *out, uint32_t *index_crc)
{
	return dvar_link_read(dir, out, index_crc, NULL, NULL);
}

int dvar_link_read(const char *dir, dvar_header *out, uint32_t *index_crc, char **bytes_out,
                   size_t *len_out)
{
	char *index = dvar_path_join(dir, DVAR_INDEX_NAME), *bytes = NULL;
	size_t len = 0;
	int rc;
	memset(out, 0, sizeof(*out));
	if (!index)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = dvar_fs_read_file(index, &bytes, &len, DVAR_INDEX_MAX)) == DVAR_OK) {
		/* The checksum and the header of the same bytes. */
		*index_crc = dvar_crc32c(bytes, len);
		rc = dvar_index_scan_bytes(index, bytes, len, take_header, out);
		if (rc == STOP)
			rc = DVAR_OK;
		else if (rc == DVAR_OK)
			rc = dvar_error_set(DVAR_ECORRUPT, "index '%s' is empty: not a dvar checkpoint", index);
	}
	if (rc)
		dvar_header_clear(out);
	if (rc == DVAR_OK && bytes_out) {
		*bytes_out = bytes;
		*len_out = len;
		bytes = NULL;
	}
	free(bytes);
	free(index);
	return rc;
}

int dvar_chain_over(const char *base, dvar_link **chain, size_t *len)
{
	dvar_header h;
	uint32_t crc = 0;
	const char *name = strrchr(base, '/');
	int rc;
	*chain = NULL;
	*len = 0;
	name = name ? name + 1 : base;
	if ((rc = dvar_link_peek(base, &h, &crc)))
		return dvar_error_prefix("base checkpoint '%s'", base);
	if (h.chain_len + 1 > DVAR_MAX_CHAIN) {
		dvar_header_clear(&h);
		return dvar_error_set(DVAR_EINVAL, "base checkpoint '%s' ends a chain of %zu links; a "
		                      "delta over it would make %d, more than the format holds: save a "
		                      "full checkpoint", base, h.chain_len + 1, DVAR_MAX_CHAIN + 1);
	}
	dvar_link *c = calloc(h.chain_len + 1, sizeof(*c));
	if (!c || !(c[0].name = strdup(name))) {
		free(c);
		dvar_header_clear(&h);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	c[0].index_crc = crc;
	/* The base's own links move over; the header keeps none. */
	if (h.chain_len)
		memcpy(c + 1, h.chain, h.chain_len * sizeof(*c));
	*len = h.chain_len + 1;
	free(h.chain);
	h.chain = NULL;
	h.chain_len = 0;
	dvar_header_clear(&h);
	*chain = c;
	return DVAR_OK;
}
