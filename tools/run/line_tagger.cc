// line_tagger.cc — see line_tagger.h.
#include "line_tagger.h"

#include <unistd.h>

#include <cerrno>

namespace plait::run {

bool LineTagger::pump(int inFd) {
  char chunk[65536];
  ssize_t got = ::read(inFd, chunk, sizeof(chunk));
  if (got < 0) return errno == EAGAIN || errno == EINTR;
  if (got == 0) return false;
  size_t scanFrom = pending_.size();
  pending_.append(chunk, static_cast<size_t>(got));
  size_t newline;
  while ((newline = pending_.find('\n', scanFrom)) != std::string::npos) {
    emit(newline + 1);
    scanFrom = 0;
  }
  while (pending_.size() >= kMaxLineBytes) emit(kMaxLineBytes);
  return true;
}

void LineTagger::flush() {
  if (!pending_.empty()) emit(pending_.size());
}

void LineTagger::emit(size_t length) {
  std::string line = prefix_;
  line.append(pending_, 0, length);
  if (line.back() != '\n') line.push_back('\n');
  pending_.erase(0, length);
  // One write per line keeps lines whole on pipes (up to PIPE_BUF) and files;
  // partial writes are finished before the next line starts.
  size_t done = 0;
  while (done < line.size()) {
    ssize_t wrote = ::write(outFd_, line.data() + done, line.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;  // the reader is gone: drop the output, keep running
    done += static_cast<size_t>(wrote);
  }
}

}  // namespace plait::run
