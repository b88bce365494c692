// Host-side stand-in for CANN's graph/tensor.h: ge::Shape, the dims of a tensor (GetDims, GetDimNum, GetDim,
// GetShapeSize = the product of the dims, 0 for no dims), as the softmax tiling source reads it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
namespace ge {
class Shape {
public:
    Shape() = default;
    Shape(const std::vector<int64_t>& d) : dims_(d) {}
    std::vector<int64_t> GetDims() const { return dims_; }
    std::size_t GetDimNum() const { return dims_.size(); }
    int64_t GetDim(std::size_t i) const { return dims_[i]; }
    int64_t GetShapeSize() const
    {
        int64_t n = 1;
        for (int64_t v : dims_) n *= v;
        return dims_.empty() ? 0 : n;
    }

private:
    std::vector<int64_t> dims_;
};
}  // namespace ge
