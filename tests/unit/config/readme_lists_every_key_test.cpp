// README's "Config keys" table names every key the schema accepts, so the documentation cannot
// fall behind a new key.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/config/schema.h"

TEST_CASE("readme_config_table_names_every_schema_key", "[config]") {
  std::ifstream in(std::string(TRAINER_SOURCE_DIR) + "/README.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t table = readme.find("## Config keys");
  REQUIRE(table != std::string::npos);
  const std::string section = readme.substr(table, readme.find("\n## ", table + 1) - table);
  for (const trainer::config::Field& f : trainer::config::config_fields()) {
    INFO("README's Config keys table lacks `" << f.key << "`");
    CHECK(section.find("`" + f.key + "`") != std::string::npos);
  }
}
