/*
 * cli/walk.c - how many elements cat reads at a time (dvar_slice_walk cuts
 * the slice into pieces of that size), and the bytes of a piece diff asks
 * dvar_diff for.
 */
#include <stdlib.h>

#include "cli.h"

uint64_t cli_walk_budget(size_t bytes_per_elem)
{
	/* The tests shrink the budget to reach the multi-piece paths on small data. */
	const char *env = getenv("DVAR_CLI_PIECE_BYTES");
	uint64_t max_bytes = env && atoll(env) > 0 ? (uint64_t)atoll(env) : CLI_PIECE_BYTES;
	uint64_t n = max_bytes / (bytes_per_elem ? bytes_per_elem : 1);

	return n ? n : 1;
}
