// ethosweep's bare-metal runner: loads a .pte and its input bytes over semihosting, runs the
// method once with ExecuTorch's portable runtime, writes the output bytes back and prints one
// "ethosweep-runner:" line per fact (parsed by ethosweep.qemu). Usage (semihosting argv):
//   runner <model.pte> <inputs.bin> <outputs.bin>
// inputs.bin holds every input tensor's bytes in order, in the memory layout the .pte expects.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/runner_util/inputs.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Span;

#ifndef ETHOSWEEP_METHOD_POOL_BYTES
#define ETHOSWEEP_METHOD_POOL_BYTES (4 * 1024 * 1024)
#endif
#ifndef ETHOSWEEP_TEMP_POOL_BYTES
#define ETHOSWEEP_TEMP_POOL_BYTES (1 * 1024 * 1024)
#endif

alignas(16) static uint8_t method_pool[ETHOSWEEP_METHOD_POOL_BYTES];
alignas(16) static uint8_t temp_pool[ETHOSWEEP_TEMP_POOL_BYTES];

static int fail(const char* what, int code) {
  printf("ethosweep-runner: error: %s\n", what);
  return code;
}

static std::vector<uint8_t> read_file(const char* path) {
  std::vector<uint8_t> bytes;
  FILE* f = fopen(path, "rb");
  if (!f) return bytes;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size > 0) {
    bytes.resize(static_cast<size_t>(size));
    if (fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) bytes.clear();
  }
  fclose(f);
  return bytes;
}

template <typename Sizes>
static void print_shape(const char* kind, size_t index, int dtype, const Sizes& sizes, size_t nbytes) {
  printf("ethosweep-runner: %s %u dtype=%d shape=[", kind, (unsigned)index, dtype);
  for (size_t d = 0; d < sizes.size(); ++d) printf(d ? ",%ld" : "%ld", (long)sizes[d]);
  printf("] bytes=%u\n", (unsigned)nbytes);
}

int main(int argc, char** argv) {
  if (argc < 4) return fail("usage: runner <model.pte> <inputs.bin> <outputs.bin>", 2);
  executorch::runtime::runtime_init();

  // The .pte stays in its own heap buffer: flatbuffer data is read in place (16-byte aligned).
  std::vector<uint8_t> pte = read_file(argv[1]);
  if (pte.empty()) return fail("cannot read the .pte over semihosting", 2);
  BufferDataLoader loader(pte.data(), pte.size());
  auto program = Program::load(&loader);
  if (!program.ok()) return fail("Program::load failed (not a .pte of this ExecuTorch version?)", 4);
  const char* method_name = *program->get_method_name(0);
  MethodMeta meta = *program->method_meta(method_name);
  printf("ethosweep-runner: program bytes=%u method=%s\n", (unsigned)pte.size(), method_name);

  MemoryAllocator method_allocator(sizeof(method_pool), method_pool);
  MemoryAllocator temp_allocator(sizeof(temp_pool), temp_pool);
  std::vector<Span<uint8_t>> planned_spans;
  size_t planned_total = 0;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    size_t size = static_cast<size_t>(*meta.memory_planned_buffer_size(i));
    auto* buffer = static_cast<uint8_t*>(method_allocator.allocate(size, 16));
    if (size && !buffer) return fail("method pool too small for the planned buffers", 5);
    planned_spans.emplace_back(buffer, size);
    planned_total += size;
  }
  printf("ethosweep-runner: planned bytes=%u buffers=%u\n", (unsigned)planned_total,
         (unsigned)planned_spans.size());
  HierarchicalAllocator planned(Span<Span<uint8_t>>(planned_spans.data(), planned_spans.size()));
  MemoryManager memory_manager(&method_allocator, &planned, &temp_allocator);

  auto method = program->load_method(method_name, &memory_manager);
  if (!method.ok()) {
    printf("ethosweep-runner: load_method error=0x%x\n", (unsigned)method.error());
    return fail("load_method failed (an operator missing from this runner's kernels?)", 6);
  }

  std::vector<uint8_t> inputs = read_file(argv[2]);
  std::vector<std::pair<char*, size_t>> input_buffers;
  size_t offset = 0;
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    auto info = meta.input_tensor_meta(i);
    if (!info.ok()) continue;
    print_shape("input", i, (int)info->scalar_type(), info->sizes(), info->nbytes());
    if (offset + info->nbytes() > inputs.size()) return fail("inputs.bin is shorter than the inputs", 7);
    input_buffers.emplace_back(reinterpret_cast<char*>(inputs.data() + offset), info->nbytes());
    offset += info->nbytes();
  }
  if (offset != inputs.size()) return fail("inputs.bin is longer than the inputs", 7);
  auto prepared = executorch::extension::prepare_input_tensors(*method, {}, input_buffers);
  if (!prepared.ok()) return fail("cannot set the inputs", 7);

  Error status = method->execute();
  if (status != Error::Ok) {
    printf("ethosweep-runner: execute error=0x%x\n", (unsigned)status);
    return fail("execute failed", 8);
  }
  printf("ethosweep-runner: method allocator used=%u of %u\n", (unsigned)method_allocator.used_size(),
         (unsigned)method_allocator.size());
  printf("ethosweep-runner: temp allocator used=%u of %u\n", (unsigned)temp_allocator.used_size(),
         (unsigned)temp_allocator.size());

  FILE* out = fopen(argv[3], "wb");
  if (!out) return fail("cannot open the output file over semihosting", 9);
  for (size_t i = 0; i < method->outputs_size(); ++i) {
    const EValue& value = method->get_output(i);
    if (!value.isTensor()) continue;
    const auto& tensor = value.toTensor();
    print_shape("output", i, (int)tensor.scalar_type(), tensor.sizes(), tensor.nbytes());
    fwrite(tensor.const_data_ptr(), 1, tensor.nbytes(), out);
  }
  fclose(out);
  printf("ethosweep-runner: done\n");
  return 0;
}
