/*
 * fuzz/fuzz_state.c - the `checkpoint` state file, a root's pointer file
 * and TensorFlow's (docs/FORMAT.md, "The pointer file"): what parses has a
 * latest checkpoint that is not empty, and strings without NUL bytes.
 */
#include "fuzz.h"
#include "format/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dvar_checkpoint_state st;

	if (dvar_checkpoint_state_parse(&st, (const char *)data, size, "fuzz") != DVAR_OK) {
		dvar_error_clear();
		return 0;
	}
	FUZZ_CHECK(st.latest && st.latest[0] != '\0');
	for (size_t i = 0; i < st.num_all; i++)
		FUZZ_CHECK(st.all[i] != NULL);
	dvar_checkpoint_state_clear(&st);
	return 0;
}
