//! Table (c): start-up costs and device memory.

use std::io::Write;

use super::BenchRow;

/// Writes table (c).
pub(super) fn write_table(rows: &[BenchRow], out: &mut dyn Write) -> std::io::Result<()> {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    writeln!(out, "\n(c) start-up (ms) and device memory (MiB)")?;
    writeln!(
        out,
        "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9}",
        "channels", "new()", "nvrtc", "load", "plan", "alloc", "device", "fft work", "regs f/p"
    )?;
    for r in rows {
        let s = &r.startup;
        writeln!(
            out,
            "{:>8} {:>8.0} {:>8.0} {:>8.1} {:>8.1} {:>8.0} {:>10.0} {:>9.0} {:>5}/{}",
            r.channels,
            r.startup_ms,
            s.compile.nvrtc_ms,
            s.compile.load_ms,
            s.fft_plan_ms,
            s.alloc_ms,
            mib(s.device_bytes),
            mib(s.fft_work_bytes),
            s.fir_registers.unwrap_or(-1),
            s.postproc_registers.unwrap_or(-1)
        )?;
    }
    Ok(())
}
