/* The Ethos-U55/U65 of the Corstone-300 subsystem (AN547 is its FPGA image): the NPU's secure
 * register base and interrupt as the Corstone-300 FVP maps them, and the driver instance
 * ExecuTorch's Ethos-U delegate reserves (ethosu_reserve_driver). QEMU models no NPU: a runner
 * with this file links and fits, and runs only on the FVP or the board. */
#include <stdint.h>
#include <stdio.h>

#include <ethosu_driver.h>

#define NPU_BASE 0x48102000u
#define NPU_IRQ 56u
#define NVIC_ISER ((volatile uint32_t *)0xE000E100u)

#ifndef ETHOSWEEP_FAST_MEMORY_BYTES
#define ETHOSWEEP_FAST_MEMORY_BYTES 0
#endif

static struct ethosu_driver npu;
#if ETHOSWEEP_FAST_MEMORY_BYTES > 0
/* Dedicated_Sram: the NPU's own cache of the arena (Vela's arena_cache_size). */
static uint8_t fast_memory[ETHOSWEEP_FAST_MEMORY_BYTES] __attribute__((aligned(32)));
#define FAST_MEMORY fast_memory
#else
#define FAST_MEMORY NULL
#endif

void ethosweep_npu_irq(void) { ethosu_irq_handler(&npu); }

int ethosweep_npu_init(void) {
  if (ethosu_init(&npu, (void *)NPU_BASE, FAST_MEMORY, ETHOSWEEP_FAST_MEMORY_BYTES, 1, 1) != 0) {
    printf("ethosweep-runner: error: Ethos-U driver init failed at 0x%08lx\n", (unsigned long)NPU_BASE);
    return -1;
  }
  NVIC_ISER[NPU_IRQ / 32] = 1u << (NPU_IRQ % 32);
  return 0;
}
