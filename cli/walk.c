/*
 * cli/walk.c - cut a slice into row-major pieces of bounded size, so that
 * cat and diff read variables of any size with bounded memory. A piece is
 * itself a slice, so each is one dvar_reader_read.
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

void cli_walk_init(cli_walk *w, const dvar_slice *region, uint64_t max_elems)
{
	uint64_t inner = 1, total;
	int k;

	w->region = *region;
	for (int d = 0; d < DVAR_MAX_RANK; d++)
		w->idx[d] = 0;
	w->done = dvar_slice_num_elements(region, &total) != DVAR_OK || total == 0;
	if (w->done || region->rank == 0) {
		w->axis = 0;
		w->run = 1;
		return;
	}
	/*
	 * The outermost axis whose inner block (the dims after it) fits the
	 * budget: it is split in runs, the dims before it one index at a time.
	 */
	for (k = region->rank - 1; k > 0; k--) {
		uint64_t next = inner * (uint64_t)region->length[k];
		if (next > max_elems)
			break;
		inner = next;
	}
	w->axis = k;
	uint64_t run = max_elems / inner;
	w->run = run < (uint64_t)region->length[k] ? (int64_t)run : region->length[k];
}

int cli_walk_next(cli_walk *w, dvar_slice *piece, uint64_t *num_elems)
{
	const dvar_slice *r = &w->region;
	int k = w->axis;

	if (w->done)
		return 0;
	*piece = *r;
	for (int d = 0; d < k; d++) {
		piece->start[d] = r->start[d] + w->idx[d];
		piece->length[d] = 1;
	}
	if (r->rank > 0) {
		int64_t left = r->length[k] - w->idx[k];
		piece->start[k] = r->start[k] + w->idx[k];
		piece->length[k] = left < w->run ? left : w->run;
	}
	dvar_slice_num_elements(piece, num_elems);

	/* Advance like an odometer: the run along axis k, then the dims before it. */
	if (r->rank == 0) {
		w->done = 1;
		return 1;
	}
	w->idx[k] += piece->length[k];
	for (int d = k; d >= 0 && w->idx[d] >= r->length[d]; d--) {
		if (d == 0) {
			w->done = 1;
			break;
		}
		w->idx[d] = 0;
		w->idx[d - 1]++;
	}
	return 1;
}
