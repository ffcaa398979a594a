// AtomicFileWriter: a file is written whole or not at all, by whichever writer renames last.
#include "runtime/core/atomic_file.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../temp_dir.h"

using trainer::AtomicFileWriter;

namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t files_in(const std::filesystem::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("two_writers_of_one_path_each_rename_a_whole_file", "[core]") {
  // Two exports to one --out at once: interleaved writes must not land in one temporary file.
  const trainer::testing::TempDir dir("atomic_two");
  const std::string path = dir.file("out.bin");
  AtomicFileWriter a(path), b(path);
  CHECK(a.temporary() != b.temporary());
  for (int i = 0; i < 1000; ++i) {
    a.write("A", 1);
    b.write("B", 1);
  }
  a.commit();
  CHECK(contents(path) == std::string(1000, 'A'));
  b.commit();
  CHECK(contents(path) == std::string(1000, 'B'));
  CHECK(files_in(dir.path()) == 1);  // no temporary left
}

TEST_CASE("a_writer_never_committed_leaves_nothing", "[core]") {
  const trainer::testing::TempDir dir("atomic_abandoned");
  const std::string path = dir.file("out.bin");
  {
    AtomicFileWriter w(path);
    w.write("partial", 7);  // (a write that failed on a full disk ends here too)
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(files_in(dir.path()) == 0);
  {
    std::ofstream(path) << "old";
    AtomicFileWriter w(path);
    w.write("new", 3);
  }
  CHECK(contents(path) == "old");  // the file before stays as it was
}

TEST_CASE("a_killed_writer_s_temporary_does_not_block_the_next_one", "[core]") {
  // A writer killed mid-write leaves its temporary. In a container the next process has the same
  // pid (1), so a name made of pid and a serial counting from 0 was taken on every retry, and
  // O_EXCL refused them all. Here: that name, left, before this process's first writer.
  const trainer::testing::TempDir dir("atomic_leftover");
  const std::string path = dir.file("out.bin");
  const std::string left = path + ".tmp." + std::to_string(::getpid()) + ".0";
  std::ofstream(left) << "half";
  AtomicFileWriter next(path);
  CHECK(next.temporary() != left);
  next.write("x", 1);
  next.commit();
  CHECK(contents(path) == "x");
  CHECK(contents(left) == "half");  // (a killed writer's temporary is left to the user)
}

TEST_CASE("a_writer_hashes_what_it_wrote_and_names_its_failures", "[core]") {
  const trainer::testing::TempDir dir("atomic_hash");
  AtomicFileWriter w(dir.file("abc"), /*hash=*/true);
  w.write("abc", 3);
  CHECK(w.commit() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK_THROWS_WITH(AtomicFileWriter(dir.file("no_such_dir/x")),
                    Catch::Contains("cannot create " + dir.file("no_such_dir/x") + ".tmp.") &&
                        Catch::Contains("No such file or directory"));
}
