/*
 * The controller's CA for the launcher's own requests (rendezvous, log
 * shipping): KDET_CONTROLLER_CA (PEM text, from the trial's token Secret)
 * or KDET_CONTROLLER_CA_FILE, the same variables libdtrain reads.
 */
#ifndef KD_LAUNCH_CACERT_H
#define KD_LAUNCH_CACERT_H

#include <curl/curl.h>

/** Make c trust the controller's CA when the environment names one; else the system's CAs. */
void kd_launch_ca(CURL *c);

#endif
