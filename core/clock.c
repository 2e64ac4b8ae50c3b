/*
 * core/clock.c - the monotonic clock that timings and progress reports use.
 */
#include <time.h>

#include "core/core.h"

double dvar_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
