// serve: the machine's own limits that the engine's figures are held to.
#pragma once

#include <cstdint>

namespace fmstack::serve {

// GB/s of reading `bytes` of floats once, summed on every thread with the
// widest vectors (what a decode step does with the weights), best of 3.
double MeasureReadBandwidth(int64_t bytes);

}  // namespace fmstack::serve
