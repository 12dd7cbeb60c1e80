#include "conf_harness.h"
