// libFuzzer target for the region validator: any bytes in a region file must give either a region
// or a clear error from validate(), inspect() and attach() — never a crash, an out-of-bounds read
// or a hang. Random bytes rarely pass the magic number, so the input is read as edits of a real
// region (two devices, four slots, one of them charged): byte 0 says whether to cut the file short
// (and bytes 1-2 where), then each 3-byte group writes one byte at an offset. Inputs are written
// to a tmpfs file: the API takes paths, as the real callers do.
// Built with clang and -DFAULTLINE_FUZZ=ON; ci/test.sh runs it for a bounded time.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/accounting/region.h"

namespace {

namespace acc = faultline::accounting;

const std::string& fuzz_path() {
  static const std::string path = "/dev/shm/faultline-fuzz-region." + std::to_string(::getpid());
  return path;
}

// The bytes of a healthy region with one charged slot.
std::vector<std::uint8_t> make_template() {
  const std::string path = fuzz_path() + ".template";
  ::unlink(path.c_str());
  acc::options opt;
  opt.devices = 2;
  opt.limits_bytes = {1 << 20, acc::no_limit};
  opt.max_slots = 4;
  opt.exit_handlers = false;
  std::vector<std::uint8_t> bytes;
  if (auto r = acc::region::create_or_attach(path, opt)) {
    if ((*r)->register_process() && (*r)->charge(0, acc::kind::data, 4096) && (*r)->charge(1, acc::kind::module, 512)) {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  ::unlink(path.c_str());
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::uint8_t> base = make_template();
  if (base.empty() || size < 3) return 0;
  std::vector<std::uint8_t> bytes = base;
  for (std::size_t i = 3; i + 2 < size; i += 3) {
    const std::size_t at = (static_cast<std::size_t>(data[i]) << 8 | data[i + 1]) % bytes.size();
    bytes[at] = data[i + 2];
  }
  if (data[0] & 1) bytes.resize((static_cast<std::size_t>(data[1]) << 8 | data[2]) % bytes.size());
  std::FILE* f = std::fopen(fuzz_path().c_str(), "wb");
  if (f == nullptr) return 0;
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  (void)acc::validate(fuzz_path());
  if (auto report = acc::inspect(fuzz_path())) (void)report->healthy();
  acc::options opt;
  opt.exit_handlers = false;
  opt.lock_bound = std::chrono::milliseconds(20);  // a garbage mutex word must not wedge the fuzzer
  opt.reader_bound = std::chrono::milliseconds(1);
  if (auto r = acc::region::attach(fuzz_path(), opt)) {
    (void)(*r)->usage(0);
    (void)(*r)->snapshot();
  }
  ::unlink(fuzz_path().c_str());
  return 0;
}
