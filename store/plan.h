/*
 * store/plan.h - private to libdvar: the save plan, who writes which value
 * (docs/STORE.md "The save plan"). A pure function of the values' sizes and
 * holders and the worker count: every worker computes the same plan without
 * exchanging it, and a unit test can check it without a save. Not installed.
 */
#ifndef DVAR_STORE_PLAN_H
#define DVAR_STORE_PLAN_H

#include <stddef.h>

#include "dvar/common.h"

DVAR_BEGIN_DECL

/* A value's holder when every worker holds a copy of it (a replica). */
#define DVAR_PLAN_ANY_WORKER (-1)

/* One value to write: a variable, a tensor or one shard (the list order is
 * the agreed save list's). */
typedef struct {
	size_t nbytes;
	int holder; /* the only worker that holds it, which must write it, or
	               DVAR_PLAN_ANY_WORKER */
} dvar_plan_value;

/*
 * writers[i] (n entries) = the worker, of W, that writes values[i]: a
 * value's holder when it has one; the others, largest first (ties in list
 * order), onto the worker with the fewest bytes so far, holders' bytes
 * included (ties to the lowest id). DVAR_EINVAL for W < 1 or a holder that
 * is not a worker; DVAR_ENOMEM.
 */
int dvar_store_plan(const dvar_plan_value *values, size_t n, int W, int *writers);

DVAR_END_DECL

#endif
