// Host-side stand-in for CANN's dlog_pub.h: the log levels and module id asc-devkit's host_log.h names.
#pragma once
#define DLOG_DEBUG 0
#define DLOG_INFO 1
#define DLOG_WARN 2
#define DLOG_ERROR 3
#define ASCENDCKERNEL 0
#define DEBUG_LOG_MASK 0
