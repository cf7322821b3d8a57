/* The entries both fake GPU tables (device_fake.c, gpu_fake.c) fill the
 * same way: devices, streams and events. */
#ifndef MSR_TESTS_COMM_FAKE_GPU_OPS_H
#define MSR_TESTS_COMM_FAKE_GPU_OPS_H

/* Designated initializers of an msr_gpu_api_t naming the including file's
 * functions of the same names. */
#define MSR_FAKE_GPU_STREAM_OPS                                                               \
    .device_count = device_count, .set_device = set_device, .stream_create = stream_create,   \
    .stream_destroy = stream_destroy, .event_create = event_create,                           \
    .event_destroy = event_destroy, .event_record = event_record, .event_query = event_query, \
    .stream_wait_event = stream_wait_event

#endif
