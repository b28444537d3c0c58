//! The default gain per channel (docs/signal-path.md): 2^(10 - sample_bits) for 8-bit output. With
//! unit-energy weights a white input of rms sigma gives channel values of complex rms sigma, so
//! 10-bit noise at 5% of full scale (25.6 counts) gives output components of rms 18: four bits
//! above zero, far from saturation. Narrower samples are scaled up and wider ones down to the same
//! output level. 4-bit output gets 1/16 of that (rms 1.1 of at most 7).

use num_complex::Complex32;

/// The default gain for `sample_bits`-bit input and `output_bits`-bit output (8 or 4).
pub fn default_gain(sample_bits: u32, output_bits: u32) -> f32 {
    let output = if output_bits == 4 { -4 } else { 0 };
    2f32.powi(10 - sample_bits as i32 + output)
}

/// A narrowband output's gain for a wideband gain `wideband`: sqrt(S) times it, S its DDC's
/// subsampling. A narrowband channel is D times narrower than a wideband one and holds 1/D of its
/// noise power (docs/signal-path.md, Narrowband levels), so sqrt(D) (S = D) leaves noise at the
/// wideband output's level; without discard (S = 2D) the PFB's window is half as long, its
/// channels take half the power again, and sqrt(2D) makes that up (katgpucbf scales its DDC taps
/// by sqrt(S) for the same reason).
pub fn narrowband_gain(wideband: f32, subsampling: usize) -> f32 {
    wideband * (subsampling as f32).sqrt()
}

/// The default gain for every one of `channels` channels.
pub fn default_gains(channels: usize, sample_bits: u32, output_bits: u32) -> Vec<Complex32> {
    vec![Complex32::new(default_gain(sample_bits, output_bits), 0.0); channels]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(default_gain(8, 8), 4.0);
        assert_eq!(default_gain(10, 8), 1.0);
        assert_eq!(default_gain(12, 8), 0.25);
        assert_eq!(default_gain(16, 8), 1.0 / 64.0);
        assert_eq!(default_gain(10, 4), 1.0 / 16.0);
        assert_eq!(default_gains(3, 10, 8), vec![Complex32::new(1.0, 0.0); 3]);
        assert_eq!(narrowband_gain(1.0, 16), 4.0);
        assert_eq!(narrowband_gain(0.25, 32), 8f32.sqrt() * 0.5);
    }
}
