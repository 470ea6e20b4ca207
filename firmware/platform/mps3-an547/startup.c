/* Minimal platform layer for QEMU's mps3-an547 (Cortex-M55, no NPU): the vector table, a reset
 * handler that turns on the FPU/MVE and starts the C runtime, and argv read over semihosting.
 * Arm's core_platform provides this for the FVPs; QEMU needs nothing more than this. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern uint32_t __stack_top, __bss_start__, __bss_end__;
extern void __libc_init_array(void);
extern void initialise_monitor_handles(void);
extern int main(int argc, char **argv);

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define SCB_CCR (*(volatile uint32_t *)0xE000ED14u)

/* -nostartfiles drops crti/crtn and crtbegin: __libc_init_array still calls _init/_fini, and
 * C++ static destructors register against __dso_handle. */
void _init(void) {}
void _fini(void) {}
void *__dso_handle = &__dso_handle;

static int semihost(int op, void *arg) {
  register int r0 __asm__("r0") = op;
  register void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

/* SYS_GET_CMDLINE (0x15): QEMU joins its -semihosting-config arg=... values with spaces. */
static int read_argv(char **argv, int max_args) {
  static char cmdline[1024];
  struct { char *buffer; int length; } block = {cmdline, sizeof(cmdline) - 1};
  if (semihost(0x15, &block) != 0) return 0;
  cmdline[block.length] = '\0';
  int argc = 0;
  for (char *token = strtok(cmdline, " "); token && argc < max_args; token = strtok(NULL, " "))
    argv[argc++] = token;
  return argc;
}

/* Overridden by npu.c in runners with an Ethos-U; its interrupt is external interrupt 56. */
__attribute__((weak)) void ethosweep_npu_irq(void) {}
__attribute__((weak)) int ethosweep_npu_init(void) { return 0; }

void Reset_Handler(void) {
  SCB_CPACR |= (0xFu << 20); /* CP10/CP11 full access: FPU and MVE (Helium) */
  SCB_CCR |= (1u << 4);      /* DIV_0_TRP: a division by zero faults instead of returning 0 */
  __asm__ volatile("dsb\n isb");
  memset(&__bss_start__, 0, (size_t)((char *)&__bss_end__ - (char *)&__bss_start__));
  initialise_monitor_handles();
  __libc_init_array(); /* runs ExecuTorch's static kernel registrations */
  static char *argv[16];
  int argc = read_argv(argv, 16);
  if (ethosweep_npu_init() != 0) exit(10);
  exit(main(argc, argv));
}

static void Fault_Handler(void) {
  printf("ethosweep: CPU fault (CFSR=0x%08lx)\n", *(volatile unsigned long *)0xE000ED28u);
  exit(3);
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16 + 64])(void) = {
    [0] = (void (*)(void))&__stack_top, [1] = Reset_Handler, [2 ... 7] = Fault_Handler,
    [16 + 56] = ethosweep_npu_irq,
};

/* ExecuTorch's default PAL prints with %zu, which Debian's newlib does not format: log here.
 * et_timestamp_t and et_pal_log_level_t are uint64_t and a char enum (runtime/platform). */
void et_pal_emit_log_message(uint64_t timestamp, int level, const char *filename,
                             const char *function, size_t line, const char *message,
                             size_t length) {
  (void)timestamp;
  (void)function;
  printf("%c executorch:%s:%lu] %.*s\n", (char)level, filename, (unsigned long)line, (int)length,
         message);
}
