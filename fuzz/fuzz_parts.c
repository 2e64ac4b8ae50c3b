/*
 * fuzz/fuzz_parts.c - the part entries a part hands its chief
 * (docs/FORMAT.md, "Part entries"), which the chief trusts no more than an
 * index: what decodes must pass the index's own checks, re-encode, and
 * decode again to the same encoding.
 */
#include "fuzz.h"
#include "format/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dvar_part p, p2;
	dvar_bytes a = { 0 }, b = { 0 };
	dvar_var_entry **vars;

	if (dvar_part_decode(&p, data, size) != DVAR_OK) {
		dvar_error_clear();
		return 0;
	}
	FUZZ_CHECK(p.part < p.nparts && p.file_size % 4096 == 0);
	vars = malloc((p.num_vars ? p.num_vars : 1) * sizeof *vars);
	FUZZ_CHECK(vars != NULL);
	for (size_t i = 0; i < p.num_vars; i++) {
		FUZZ_CHECK(dvar_var_check(&p.vars[i], p.nparts, "fuzz") == DVAR_OK);
		vars[i] = &p.vars[i];
	}
	FUZZ_CHECK(dvar_part_encode(&a, &p, vars) == DVAR_OK);
	FUZZ_CHECK(dvar_part_decode(&p2, a.data, a.len) == DVAR_OK);
	for (size_t i = 0; i < p2.num_vars; i++)
		vars[i] = &p2.vars[i];
	FUZZ_CHECK(dvar_part_encode(&b, &p2, vars) == DVAR_OK);
	FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	free(vars);
	free(a.data);
	free(b.data);
	dvar_part_clear(&p);
	dvar_part_clear(&p2);
	return 0;
}
