// status_report.h — where every communicator of a process is, on a signal
// (issue 15 item 1's status query). With PLAIT_STATUS_SIGNAL set to a signal
// number (10 is SIGUSR1 on Linux), `kill -USR1 <pid>` makes the process log,
// at WARN, one line per live communicator: its rank, the collective it is at
// and for how long, and where this host's ranks are (the op board). Against
// a job that seems stuck: signal every rank (`pkill -USR1 <program>`) and
// read the lines side by side, or use the timeout's own report.
//
// The handler only writes a byte to a pipe; a reporter thread (started with
// the first communicator, when the tunable is set) reads it and logs.
#pragma once

#include <string>

namespace plait {

class Communicator;

// Called by every communicator once initialised, and when it goes.
void registerForStatusReports(const Communicator* comm);
void unregisterFromStatusReports(const Communicator* comm);
// The lines a report logs now (for tests and for the reporter thread).
std::string statusReportNow();

}  // namespace plait
