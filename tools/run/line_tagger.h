// line_tagger.h — copies one rank's output stream to the launcher's, one
// whole line at a time, each line prefixed with "[rank] ".
#pragma once

#include <string>

namespace plait::run {

// Not thread-safe; plait-run's single event loop owns every tagger.
class LineTagger {
 public:
  // Lines go to `outFd` (not owned), each starting with `prefix`.
  LineTagger(std::string prefix, int outFd) : prefix_(std::move(prefix)), outFd_(outFd) {}

  // Reads what is available from `inFd` (non-blocking) and writes every
  // complete line. Returns false at end of file or on a read error, true
  // while the stream is open.
  bool pump(int inFd);

  // Writes a final incomplete line, ending it with a newline.
  void flush();

 private:
  // Writes prefix_ + the first `length` bytes of pending_ + a newline if it
  // lacks one, in one write() where it fits, and drops them from pending_.
  void emit(size_t length);

  // A line longer than this is cut and emitted in parts so a rank that
  // never writes a newline cannot grow the launcher without bound.
  static constexpr size_t kMaxLineBytes = 1 << 20;

  std::string prefix_;
  int outFd_;
  std::string pending_;
};

}  // namespace plait::run
