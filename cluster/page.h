/* The job's page, built into the coordinator from cluster/page/index.html
 * (cmake/embed.cmake): one HTML file with its style and script, which
 * polls /api/job and draws its own SVG charts, and fetches a rank's last
 * output lines from /api/output when asked, loading nothing else. */
#ifndef MSR_CLUSTER_PAGE_H
#define MSR_CLUSTER_PAGE_H

#include <stddef.h>

extern const unsigned char msr_page_index[];
extern const size_t msr_page_index_len;

#endif
