/*
 * fuzz/fuzz_index.c - the index's entries (docs/FORMAT.md, "The index"):
 * the first byte picks the decoder (header, variable entry of version 2 or
 * 3, slice entry, row piece), the rest is its input. What decodes must
 * encode back to bytes that decode to the same thing, and a slice must fit
 * its own rank.
 */
#include "fuzz.h"
#include "format/format.h"

static void same_bytes(const dvar_bytes *a, const dvar_bytes *b)
{
	FUZZ_CHECK(a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0));
}

static void header(const uint8_t *p, size_t n)
{
	dvar_header h, h2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_header_decode(&h, p, n) != DVAR_OK)
		return;
	FUZZ_CHECK(h.num_files >= 1 && h.block_size == 65536);
	FUZZ_CHECK(dvar_header_encode(&a, &h) == DVAR_OK);
	/* A newer version's trailing fields are skipped, not kept. */
	if (h.version <= DVAR_FORMAT_VERSION) {
		FUZZ_CHECK(dvar_header_decode(&h2, a.data, a.len) == DVAR_OK);
		FUZZ_CHECK(dvar_header_encode(&b, &h2) == DVAR_OK);
		same_bytes(&a, &b);
		dvar_header_clear(&h2);
	}
	dvar_header_clear(&h);
	free(a.data);
	free(b.data);
}

static void variable(const uint8_t *p, size_t n, int deltas)
{
	dvar_var_entry v, v2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_var_decode(&v, "v", p, n, deltas) != DVAR_OK)
		return;
	FUZZ_CHECK(v.shape.rank >= 0 && v.shape.rank <= DVAR_MAX_RANK && v.num_attrs <= 64);
	for (size_t i = 1; i < v.num_attrs; i++)
		FUZZ_CHECK(strcmp(v.attrs[i - 1].key, v.attrs[i].key) < 0);
	FUZZ_CHECK(dvar_var_encode(&a, &v, deltas) == DVAR_OK);
	FUZZ_CHECK(dvar_var_decode(&v2, "v", a.data, a.len, deltas) == DVAR_OK);
	FUZZ_CHECK(dvar_var_encode(&b, &v2, deltas) == DVAR_OK);
	same_bytes(&a, &b);
	dvar_var_entry_clear(&v);
	dvar_var_entry_clear(&v2);
	free(a.data);
	free(b.data);
}

static void slice(const uint8_t *p, size_t n)
{
	dvar_slice_entry s, s2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_slice_entry_decode(&s, p, n, "fuzz") != DVAR_OK)
		return;
	FUZZ_CHECK(s.slice.rank >= 0 && s.slice.rank <= DVAR_MAX_RANK);
	FUZZ_CHECK(s.num_chunks == (s.chunk_size ? (s.raw_bytes + s.chunk_size - 1) / s.chunk_size : 0));
	for (size_t c = 0; c < s.num_chunks; c++)
		FUZZ_CHECK(s.chunks[c].offset % 64 == 0 && s.chunks[c].codec <= 1);
	FUZZ_CHECK(dvar_slice_entry_encode(&a, &s) == DVAR_OK);
	FUZZ_CHECK(dvar_slice_entry_decode(&s2, a.data, a.len, "fuzz") == DVAR_OK);
	FUZZ_CHECK(dvar_slice_entry_encode(&b, &s2) == DVAR_OK);
	same_bytes(&a, &b);
	dvar_slice_entry_clear(&s);
	dvar_slice_entry_clear(&s2);
	free(a.data);
	free(b.data);
}

static void piece(const uint8_t *p, size_t n)
{
	dvar_piece pc, pc2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_piece_decode(&pc, p, n, "fuzz") != DVAR_OK)
		return;
	FUZZ_CHECK(dvar_piece_encode(&a, &pc) == DVAR_OK);
	FUZZ_CHECK(dvar_piece_decode(&pc2, a.data, a.len, "fuzz") == DVAR_OK);
	FUZZ_CHECK(dvar_piece_encode(&b, &pc2) == DVAR_OK);
	same_bytes(&a, &b);
	dvar_piece_clear(&pc);
	dvar_piece_clear(&pc2);
	free(a.data);
	free(b.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 5) {
	case 0: header(data + 1, size - 1); break;
	case 1: variable(data + 1, size - 1, 0); break;
	case 2: variable(data + 1, size - 1, 1); break;
	case 3: slice(data + 1, size - 1); break;
	default: piece(data + 1, size - 1); break;
	}
	dvar_error_clear();
	return 0;
}
