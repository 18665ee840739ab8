// sglnode cuda_toolkit probe: a trivial kernel compiled for the node's GPU architecture.
__global__ void sglnode_probe(int *out) { out[threadIdx.x] = static_cast<int>(threadIdx.x); }
