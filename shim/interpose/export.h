#pragma once

/* An interposed function: exported (the rest of the library is hidden), C linkage. */
#define TLSTUNE_EXPORT extern "C" __attribute__((visibility("default")))
