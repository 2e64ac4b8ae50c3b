/*
 * dvar/dvar.h - the whole public API of libdvar.
 */
#ifndef DVAR_DVAR_H
#define DVAR_DVAR_H

#include "attrs.h"
#include "common.h"
#include "core.h"
#include "format.h"
#include "input.h"
#include "restore.h"
#include "runtime.h"
#include "sharding.h"
#include "store.h"

#endif
