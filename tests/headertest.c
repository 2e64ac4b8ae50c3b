/*
 * tests/headertest.c - the public headers compile on their own as strict
 * C11 (-pedantic -Werror) and as C++ (headertest.cc); linking checks that the
 * shared library exports what they declare. Both use every _INIT macro and
 * _init function of the options structs.
 */
#include "headertest.h"

int main(void)
{
	int (*run)(dvar_strategy *, dvar_replica_fn, void *) = dvar_strategy_run;
	void (*release)(void *) = dvar_free;
	return check_options() + (dvar_version()[0] == '\0') + (run == NULL) + (release == NULL);
}
