#include "harness/run/output_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "harness/detail/sys.h"

namespace faultline::harness {

struct output_capture::state {
  int read_fd = -1;
  int write_fd = -1;
  int log_fd = -1;   // opened once the log is spilled or committed
  int wake_fd = -1;
  std::filesystem::path log_path;
  // The log is held in memory until the run is over, or until it grows past spill_bytes or the
  // run lasts past spill_after: a passing run that is not kept then costs no file at all.
  std::string pending;
  bool log_opened = false;
  bool settled = false;  // commit() or discard() was called
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();  // eventfd: finish() asks the drain thread to wind down
  std::uint64_t head_limit = 0;  // 0: unbounded
  std::uint64_t tail_limit = 0;
  std::thread drainer;

  // Owned by the drain thread until it is joined.
  std::uint64_t head_written = 0;
  std::deque<std::string> tail;
  std::uint64_t tail_bytes = 0;
  output_stats stats;
  bool log_failed = false;

  // finish()'s request, read by the drain thread once woken.
  std::mutex mu;
  std::chrono::steady_clock::time_point deadline{};
  bool finished = false;
  std::chrono::milliseconds grace{0};

  ~state() {
    for (int fd : {read_fd, write_fd, log_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void open_log() {
    if (log_opened) return;
    log_opened = true;
    log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) log_failed = true;
    std::string held;
    held.swap(pending);
    write_out(held);
  }

  void write_out(std::string_view data) {
    if (log_failed || data.empty()) return;
    // A log that cannot be written (a full disk) must not stop the draining: the program would
    // block on the pipe. The run's record still says what happened to it.
    if (!detail::write_all(log_fd, data, "log")) log_failed = true;
  }

  bool spill_due() const {
    return pending.size() >= output_spill_bytes || std::chrono::steady_clock::now() - started >= output_spill_after;
  }

  void to_log(std::string_view data) {
    if (data.empty()) return;
    if (log_opened) return write_out(data);
    pending.append(data);
    if (spill_due()) open_log();
  }

  void take(const char* data, std::size_t n) {
    stats.bytes += n;
    std::string_view chunk(data, n);
    if (head_limit == 0 || head_written < head_limit) {
      const std::size_t head = head_limit == 0 ? n : std::min<std::uint64_t>(n, head_limit - head_written);
      to_log(chunk.substr(0, head));
      head_written += head;
      chunk.remove_prefix(head);
    }
    if (chunk.empty()) return;
    tail.emplace_back(chunk);
    tail_bytes += chunk.size();
    while (tail_bytes > tail_limit) {
      std::string& front = tail.front();
      const std::uint64_t over = tail_bytes - tail_limit;
      if (front.size() <= over) {
        tail_bytes -= front.size();
        stats.bytes_dropped += front.size();
        tail.pop_front();
      } else {
        front.erase(0, over);
        tail_bytes -= over;
        stats.bytes_dropped += over;
      }
    }
  }

  void drain() {
    char buf[64 * 1024];
    bool winding_down = false;
    std::chrono::steady_clock::time_point until{};
    for (;;) {
      int timeout_ms = -1;
      bool last_look = false;  // the grace is over: take what the pipe holds, then stop
      if (!log_opened && !pending.empty()) {  // a long run's output reaches its file in time
        if (spill_due()) open_log();
        else
          timeout_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            started + output_spill_after - std::chrono::steady_clock::now())
                                            .count()) + 1;
      }
      if (winding_down) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        last_look = left.count() <= 0;
        timeout_ms = last_look ? 0 : static_cast<int>(left.count());
      }
      pollfd fds[2] = {{read_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      const int woke = ::poll(fds, winding_down ? 1 : 2, timeout_ms);
      if (woke == 0 && !winding_down) continue;  // the spill time came
      if (woke < 0 && errno != EINTR) break;
      if (woke > 0 && fds[0].revents != 0) {
        bool eof = false;
        // A bounded batch, so that a writer that never pauses cannot keep this loop from its deadline.
        for (int batch = 0; batch < 16; ++batch) {
          const ssize_t n = ::read(read_fd, buf, sizeof buf);
          if (n > 0) {
            take(buf, static_cast<std::size_t>(n));
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          eof = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
          break;
        }
        if (eof) break;
      }
      if (last_look) {
        stats.still_open = true;
        break;
      }
      if (!winding_down && woke > 0 && fds[1].revents != 0) {
        std::lock_guard lock(mu);
        winding_down = true;
        until = deadline;
      }
    }
    if (!tail.empty()) {
      if (stats.bytes_dropped > 0)
        to_log("\n[faultline: " + std::to_string(stats.bytes_dropped) +
               " bytes of output dropped here: the log keeps its first and last " + std::to_string(head_limit) +
               " bytes (--log-limit)]\n");
      for (const auto& c : tail) to_log(c);
    }
    if (stats.still_open)
      to_log("\n[faultline: the run's output was still open " + std::to_string(grace.count()) +
             " ms after it ended (a process outside the run holds the pipe); what came later was dropped]\n");
  }
};

output_capture::output_capture(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
output_capture::output_capture(output_capture&&) noexcept = default;
output_capture& output_capture::operator=(output_capture&& o) noexcept {
  if (this != &o) {
    if (s_) commit();
    s_ = std::move(o.s_);
  }
  return *this;
}

output_capture::~output_capture() {
  if (s_) commit();
}

core::result<output_capture> output_capture::open(const std::filesystem::path& log_path, std::uint64_t limit_bytes) {
  auto s = std::make_unique<state>();
  s->log_path = log_path;
  // The file itself comes later (state::pending); a log that could never be written is an error now.
  const auto dir = log_path.parent_path().empty() ? std::filesystem::path(".") : log_path.parent_path();
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return detail::sys_error(errno, "open " + log_path.string());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return detail::sys_error(errno, "pipe for the run's output");
  s->read_fd = fds[0];
  s->write_fd = fds[1];
  // Only the harness's end: the program's stays blocking, as a shell pipe's would.
  ::fcntl(s->read_fd, F_SETFL, ::fcntl(s->read_fd, F_GETFL) | O_NONBLOCK);
  s->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd < 0) return detail::sys_error(errno, "eventfd for the run's output");
  s->head_limit = limit_bytes / 2;
  s->tail_limit = limit_bytes - limit_bytes / 2;
  if (limit_bytes != 0 && s->head_limit == 0) s->head_limit = 1;  // a 1-byte limit: keep something
  try {
    s->drainer = std::thread([st = s.get()] { st->drain(); });
  } catch (const std::system_error& e) {
    return core::status(core::errc::io_error, std::string("cannot start the output drain thread: ") + e.what());
  }
  return output_capture(std::move(s));
}

int output_capture::write_fd() const noexcept { return s_ ? s_->write_fd : -1; }

void output_capture::close_write_end() noexcept {
  if (s_ && s_->write_fd >= 0) {
    ::close(s_->write_fd);
    s_->write_fd = -1;
  }
}

output_stats output_capture::finish(std::chrono::milliseconds grace) {
  if (!s_) return {};
  {
    std::lock_guard lock(s_->mu);
    if (s_->finished) return s_->stats;
    s_->grace = grace;
    s_->deadline = std::chrono::steady_clock::now() + grace;
  }
  close_write_end();
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(s_->wake_fd, &one, sizeof one);
  if (s_->drainer.joinable()) s_->drainer.join();
  std::lock_guard lock(s_->mu);
  s_->finished = true;
  return s_->stats;
}

bool output_capture::commit() {
  if (!s_) return false;
  finish(std::chrono::milliseconds(0));
  if (!s_->settled) {
    s_->settled = true;
    s_->open_log();
    if (s_->log_fd >= 0) ::close(s_->log_fd);
    s_->log_fd = -1;
  }
  return !s_->log_failed;
}

void output_capture::discard() {
  if (!s_) return;
  finish(std::chrono::milliseconds(0));
  if (s_->log_fd >= 0) ::close(s_->log_fd);
  s_->log_fd = -1;
  if (s_->log_opened) ::unlink(s_->log_path.c_str());
  s_->pending.clear();
  s_->settled = true;
}

}  // namespace faultline::harness
