/*
 * tests/headertest.c - the public headers compile on their own as strict
 * C11 (-pedantic -Werror) and as C++ (headertest.cc); linking checks that the
 * shared library exports what they declare.
 */
#include "dvar/dvar.h"

int main(void)
{
	dvar_write_options w = DVAR_WRITE_OPTIONS_INIT;
	dvar_read_options r = DVAR_READ_OPTIONS_INIT;
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_variable_spec vs = DVAR_VARIABLE_SPEC_INIT;
	dvar_save_options sv = DVAR_SAVE_OPTIONS_INIT;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	int (*run)(dvar_strategy *, dvar_replica_fn, void *) = dvar_strategy_run;
	return (int)(w.version + r.version + so.version + vs.version + sv.version + ro.version) - 6 +
	       (dvar_version()[0] == '\0') + (run == NULL);
}
