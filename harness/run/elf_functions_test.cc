// function_covers (elf_functions.h) on this test program's own symbol table: two functions with a
// gap between them that no symbol covers, as the stripped internals of a static runtime are.
#include "harness/run/elf_functions.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" void fl_cover_first();
extern "C" void fl_cover_second();

asm(R"(
    .text
    .p2align 4
    .globl fl_cover_first
    .type fl_cover_first, @function
fl_cover_first:
    ret
    .size fl_cover_first, 1
    .skip 63, 0xcc
    .globl fl_cover_second
    .type fl_cover_second, @function
fl_cover_second:
    ret
    .size fl_cover_second, 1
)");

// A static function of this program: in .symtab only.
extern "C" {
[[gnu::noinline, gnu::used]] static int fl_static_only() { return 7; }
}

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

std::uint64_t offset_of(void (*fn)()) {
  Dl_info info{};
  EXPECT_NE(::dladdr(reinterpret_cast<void*>(fn), &info), 0);
  return reinterpret_cast<std::uintptr_t>(reinterpret_cast<void*>(fn)) -
         reinterpret_cast<std::uintptr_t>(info.dli_fbase);
}

TEST(elf_functions, a_function_covers_its_own_bytes_and_not_the_gap_after_it) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const std::uint64_t first = offset_of(&fl_cover_first);
  const std::uint64_t second = offset_of(&fl_cover_second);
  ASSERT_EQ(second - first, 64u);
  EXPECT_EQ(function_covers(self, first), true);
  EXPECT_EQ(function_covers(self, first + 1), false);  // what addr2line would call fl_cover_first
  EXPECT_EQ(function_covers(self, first + 40), false);
  EXPECT_EQ(function_covers(self, second), true);
  EXPECT_EQ(function_covers(self, offset_of(reinterpret_cast<void (*)()>(&offset_of))), true);
}

TEST(elf_functions, a_module_it_cannot_read_or_that_names_no_function_tells_nothing) {
  EXPECT_EQ(function_covers("/nonexistent/libnothing.so", 0x1000), std::nullopt);
  const fs::path text = fs::temp_directory_path() / "fl-elf-functions-not-elf.txt";
  std::ofstream(text) << "not an object file\n";
  EXPECT_EQ(function_covers(text, 0x10), std::nullopt);
  fs::remove(text);
}

// program_function_names: the program's own static functions and those of the libraries it needs
// (libc's malloc); a script names nothing (what it runs is not known).
TEST(program_function_names, reads_the_program_and_the_libraries_it_needs) {
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  auto names = program_function_names(fs::read_symlink("/proc/self/exe").string(), env);
  ASSERT_TRUE(names.has_value());
  EXPECT_EQ(fl_static_only(), 7);
  EXPECT_TRUE(names->count("fl_static_only")) << "a static function, in .symtab only";
  EXPECT_TRUE(names->count("fl_cover_first"));
  EXPECT_TRUE(names->count("malloc")) << "libc's, through DT_NEEDED";
  EXPECT_FALSE(names->count("fl_no_such_function"));
  const fs::path script = fs::temp_directory_path() / ("fl_elf_script_" + std::to_string(::getpid()));
  std::ofstream(script) << "#!/bin/sh\ntrue\n";
  EXPECT_FALSE(program_function_names(script.string(), env).has_value());
  fs::remove(script);
  EXPECT_FALSE(program_function_names("no-such-program-anywhere", env).has_value());
}

}  // namespace
}  // namespace faultline::harness
