/* libmsrun is assembled from the modules' objects; this file only gives the
 * shared library a translation unit of its own. */
#include "msrun/msrun.h"

MSR_API const char *msr_version(void)
{
    return MSR_VERSION_STRING;
}
