/*
 * tests/fault/fault.h - the fault kinds that the shim (fault.c) injects and
 * the driver (fault_driver.c) asks for: dvar_fault_arm's kind. Test-only.
 */
#ifndef DVAR_TESTS_FAULT_H
#define DVAR_TESTS_FAULT_H

enum {
	FAULT_EIO,     /* the call fails with EIO */
	FAULT_ENOSPC,  /* ENOSPC (not a read) */
	FAULT_EDQUOT,  /* EDQUOT (not a read) */
	FAULT_SHORT,   /* half the bytes; a write's next ones fail with ENOSPC */
	FAULT_CRASH,   /* the process ends there (_exit(77)) */
	FAULT_EINTR,   /* a read or write interrupted before any byte moved */
	FAULT_PARTIAL, /* a write moves half its bytes, the next ones whole */
	FAULT_ENOMEM,  /* an allocation returns NULL (allocations counted, not calls) */
	NKINDS
};

#endif
