/*
 * fuzz/fuzz_tf.c - a TensorBundle's index entries (docs/FORMAT.md,
 * "TensorFlow checkpoints"): the first byte picks BundleHeaderProto,
 * BundleEntryProto, a slice key or a string tensor's data. What decodes
 * re-encodes to bytes that decode to the same encoding; a slice key's
 * parts encode back to the key.
 */
#include "fuzz.h"
#include "format/tf.h"

static void header(const uint8_t *p, size_t n)
{
	dvar_tf_header h, h2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_tf_header_decode(&h, p, n) != DVAR_OK)
		return;
	(void)dvar_tf_header_check(&h, "fuzz");
	FUZZ_CHECK(dvar_tf_header_encode(&a, &h) == DVAR_OK);
	FUZZ_CHECK(dvar_tf_header_decode(&h2, a.data, a.len) == DVAR_OK);
	FUZZ_CHECK(dvar_tf_header_encode(&b, &h2) == DVAR_OK);
	FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	dvar_tf_header_clear(&h);
	dvar_tf_header_clear(&h2);
	free(a.data);
	free(b.data);
}

static void entry(const uint8_t *p, size_t n)
{
	dvar_tf_entry e, e2;
	dvar_bytes a = { 0 }, b = { 0 };
	if (dvar_tf_entry_decode(&e, p, n, "fuzz") != DVAR_OK)
		return;
	FUZZ_CHECK(e.shape.rank >= 0 && e.shape.rank <= DVAR_MAX_RANK);
	FUZZ_CHECK(dvar_tf_entry_encode(&a, &e) == DVAR_OK);
	FUZZ_CHECK(dvar_tf_entry_decode(&e2, a.data, a.len, "fuzz") == DVAR_OK);
	FUZZ_CHECK(dvar_tf_entry_encode(&b, &e2) == DVAR_OK);
	FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	for (size_t k = 0; k < e.num_slices; k++) {
		dvar_slice s;
		/* Inside the shape or refused; never a slice outside it. */
		if (dvar_tf_slice_resolve(&e.slices[k], &e.shape, &s, "fuzz") == DVAR_OK)
			FUZZ_CHECK(dvar_slice_check(&s, &e.shape) == DVAR_OK);
	}
	dvar_tf_entry_clear(&e);
	dvar_tf_entry_clear(&e2);
	free(a.data);
	free(b.data);
}

static void slice_key(const uint8_t *p, size_t n)
{
	char *full = NULL;
	size_t full_len = 0;
	dvar_tf_slice s;
	dvar_bytes a = { 0 };
	int rc = dvar_tf_slice_key_decode(p, n, &full, &full_len, &s);
	if (rc != 1)
		return;
	FUZZ_CHECK(s.rank >= 0 && s.rank <= DVAR_MAX_RANK);
	FUZZ_CHECK(dvar_tf_slice_key_encode(&a, full, full_len, &s) == DVAR_OK);
	/* OrderedCode has one encoding per value: the key comes back. */
	FUZZ_CHECK(a.len == n && memcmp(a.data, p, n) == 0);
	free(full);
	free(a.data);
}

static void strings(const uint8_t *p, size_t n)
{
	uint64_t count, lens[16];
	size_t at = 0;
	if (n < 1)
		return;
	count = p[0] % 16;
	if (dvar_tf_strings_decode(p + 1, n - 1, count, lens, &at, "fuzz") != DVAR_OK)
		return;
	uint64_t total = 0;
	for (uint64_t i = 0; i < count; i++)
		total += lens[i];
	FUZZ_CHECK(at <= n - 1 && total == n - 1 - at);
	(void)dvar_tf_strings_crc(p + 1, n - 1, count, lens, at);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 4) {
	case 0: header(data + 1, size - 1); break;
	case 1: entry(data + 1, size - 1); break;
	case 2: slice_key(data + 1, size - 1); break;
	default: strings(data + 1, size - 1); break;
	}
	dvar_error_clear();
	return 0;
}
