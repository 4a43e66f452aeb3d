// util: how far apart two CPUs are, as a cache line's round trip between
// them. On the project's 2-vCPU AMD EPYC VMs the host moves the two vCPUs,
// over minutes, between one core complex and two: the round trip goes from
// 51-110 ns to 310-380 ns (547-556 in one run), and everything that hands
// data from one core to the other slows with it (an allreduce inside a node
// by 3-4x, OpenMPI's alike; OpenBLAS's two threads by up to 15%). Benches
// print it beside their rounds, so that a reader can tell the machine's
// state from the program's.
#pragma once

namespace fmstack {

// Nanoseconds for one round trip of a cache line between the first two CPUs
// this process may run on, the mean of `trips`, each side a thread pinned to
// one of them (the calling thread's affinity is restored after). 0 when
// there are fewer than two CPUs, `trips` is outside 1..10,000,000, a pin is
// refused, or the trips overrun a 2 s deadline (a CPU taken by something
// else for whole time slices).
double CoreRoundTripNs(int trips = 100000);

}  // namespace fmstack
