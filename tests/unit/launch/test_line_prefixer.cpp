// LinePrefixer: whole lines only, each with its prefix, however the bytes arrive.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "launch_test_util.h"
#include "runtime/launch/line_prefixer.h"

using trainer::launch::LinePrefixer;

TEST_CASE("prefixer_writes_whole_lines_across_arbitrary_chunks", "[launch]") {
  const std::string text = "first line\nsecond\n\nfourth is partial";
  for (size_t chunk : {1, 2, 3, 7, 100}) {
    launch_test::Capture out;
    LinePrefixer p("[rank 3] ", out.fd());
    for (size_t i = 0; i < text.size(); i += chunk) {
      p.feed(text.data() + i, std::min(chunk, text.size() - i));
      // Between feeds, only complete lines have been written.
      std::string so_far = out.text();
      INFO("chunk " << chunk << " after " << i << " bytes: '" << so_far << "'");
      CHECK((so_far.empty() || so_far.back() == '\n'));
    }
    CHECK(out.text() == "[rank 3] first line\n[rank 3] second\n[rank 3] \n");
    p.finish();
    CHECK(out.text() ==
          "[rank 3] first line\n[rank 3] second\n[rank 3] \n[rank 3] fourth is partial\n");
  }
}

TEST_CASE("prefixer_finish_without_partial_line_adds_nothing", "[launch]") {
  launch_test::Capture out;
  LinePrefixer p("[rank 0] ", out.fd());
  p.feed("a\n", 2);
  p.finish();
  CHECK(out.text() == "[rank 0] a\n");
}
