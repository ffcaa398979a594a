// Shape and Tensor: element counts, equality, views and checked typed access.
#include "runtime/core/tensor.h"

#include <catch2/catch.hpp>
#include <vector>

#include "runtime/core/check.h"

using trainer::DType;
using trainer::Shape;
using trainer::Tensor;

TEST_CASE("shape_numel_is_the_product_of_dims", "[tensor]") {
  const Shape s{2, 3, 5};
  CHECK(s.rank == 3);
  CHECK(s.numel() == int64_t{2} * 3 * 5);
  CHECK(Shape{}.numel() == 1);  // a scalar
  CHECK(Shape{4, 0}.numel() == 0);
}

TEST_CASE("shape_equality_compares_rank_and_dims", "[tensor]") {
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK_FALSE(Shape{2, 3} == Shape{3, 2});
  CHECK_FALSE(Shape{6} == Shape{6, 1});
  CHECK(Shape{2, 3}.str() == "[2, 3]");
}

TEST_CASE("shape_rejects_more_than_max_dims", "[tensor]") {
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5}), trainer::CheckError);
}

TEST_CASE("tensor_nbytes_is_numel_times_dtype_size", "[tensor]") {
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    const Tensor x(nullptr, Shape{3, 7}, t);
    INFO(trainer::dtype_name(t));
    CHECK(x.nbytes() == 21 * trainer::dtype_size(t));
  }
  CHECK(trainer::dtype_size(DType::bf16) == 2);
  CHECK(Tensor().empty());
}

TEST_CASE("tensor_view_shares_memory_and_checks_numel", "[tensor]") {
  std::vector<float> buf(12);
  const Tensor x(buf.data(), Shape{3, 4});
  const Tensor v = x.view(Shape{2, 6});
  CHECK(v.data == x.data);
  CHECK(v.shape == (Shape{2, 6}));
  CHECK_THROWS_AS(x.view(Shape{5}), trainer::CheckError);
}

TEST_CASE("tensor_typed_access_checks_dtype", "[tensor]") {
  std::vector<int32_t> ids(4);
  const Tensor t(ids.data(), Shape{4}, DType::i32);
  CHECK(t.i32() == ids.data());
  CHECK_THROWS_WITH(t.f32(), Catch::Contains("i32"));
}
