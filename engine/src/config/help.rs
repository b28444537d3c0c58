//! The texts of `fengine --help`: what the engine does, its HTTP API and the output language.

pub(super) const ABOUT: &str =
    "GPU F-engine: receives digitiser samples over SPEAD, channelises them \
(PFB + FFT), applies delay, phase and gain, and sends 8-bit spectra in the katgpucbf format.";

pub(super) const LONG_ABOUT: &str = "\
GPU F-engine: receives both polarisations of one digitiser (SPEAD-64-48, one heap per packet, \
--sample-bits signed samples packed MSB first, in the digitiser ICD's format, M1000-0001-053: \
the status item's bit 1 and bits 32-47 counted as saturated heaps and samples, descriptor heaps \
counted as metadata), channelises them with a --taps-tap polyphase \
filter bank and a 2n-point real FFT (n = --channels), applies coarse and fine delay, fringe phase \
and a complex gain per channel, quantises to 8 bits and sends heaps of --spectra-per-heap spectra \
in the katgpucbf F-engine format (items timestamp, feng_id, frequency, feng_raw; their \
descriptors at start, after (--feng-id + 1) x 5 s, then every --array-size x 5 s).

Work goes in frames of --heaps-per-frame output heaps: a chunk of S x H x 2n new samples per \
polarisation, plus samples kept from the previous chunk for the filter and for delays up to \
--max-delay. Spectrum m of the frame whose chunk starts at ADC sample T has timestamp \
T - lag + m 2n (lag = (taps-1) 2n + max delay, rounded up to 2n): the ADC sample of its first \
input sample before delay. An output heap is sent only if every input sample of every spectrum \
in it (both polarisations) arrived.

--dst and the output flags make one output, named wideband. Instead of --dst, each --wideband \
NAME:dst=ADDR[+N]:PORT,key=value,... makes an output of its own (at most 8, all from the one \
input): its own channels, taps, bits, filter, dither, gain and destinations, the output flags \
giving the keys it leaves out. Each --narrowband NAME:dst=...,channels=N,decimation=D,centre=HZ,... \
(beside --dst or --wideband, or alone; 8 outputs in all) makes a narrowband output: the band \
fs/(2D) wide around the centre, mixed down, filtered and subsampled by D = 8, 16 or 32, in n \
channels, each spectrum 2nD ADC samples apart. Each output has its own lag (its window less one \
step plus the max delay, rounded up to D and then to a step); the chunk is S x H times the \
longest step of any output, a whole number of every output's heaps.";

pub(super) const AFTER_HELP: &str = "\
HTTP API (--control): GET /health, /status (JSON, outputs keyed by name), /metrics (Prometheus),
/delays, /gains, /outputs/NAME (its part of /status), /outputs/NAME/gains.
  PUT /delays {\"pol0\": {\"delay\": 1.5e-9, \"delay_rate\": 0, \"phase\": 0.1, \"phase_rate\": 0},
               \"pol1\": \"1.5e-9,0:0.1,0\", \"load_timestamp\": 123456789}
    Units s, s/s, rad, rad/s; |delay| <= --max-delay, |delay_rate| < 1,
    |phase_rate| <= pi x the sample rate. Load at an ADC timestamp, at \"load_time\"
    (Unix s; needs --sync-time), or, with neither, from the next frame. A polarisation left out
    keeps its model.
  PUT /gains {\"pol0\": 0.5, \"pol1\": [0.5, -0.1]}  or one [re, im] per channel: [[re, im], ...].
    Gains belong to an output: /outputs/NAME/gains is output NAME's, /gains the one named
    wideband (--dst's output; with --wideband, the one given that name, if any).
  PUT /outputs/NAME {\"centre\": 1.2e9}: a narrowband output's centre in Hz, from the next frame
    on; quantised to F = round(centre / fs 2^32) (/status reports the centre in use), its band
    inside 0 .. fs/2. Refused (400) for a wideband output.
  A bad request gets a 4xx with {\"error\": \"<sentence>\"} and changes nothing.
Limits: a request body of at most 128 bytes per channel of the largest output, and at least
1 MiB (8 MiB at 65536 channels: room for a PUT /gains with one [re, im] per channel for both
polarisations in compact JSON), else 413; a request's headers within 20 s of the connection or
of its previous reply, else the connection is closed; its body within 10 s of its headers, else
408; 64 connections at a time, more wait to be accepted.
With --control-token (or FENGINE_CONTROL_TOKEN), every change (PUT) needs the header
\"Authorization: Bearer TOKEN\", else 401; GET stays open. --control binds loopback unless told
otherwise (0.0.0.0:7147: every interface).

katcp (--katcp ADDR:PORT, off unless given; no token): katgpucbf's requests and sensors for
aiokatcp clients. ?gain STREAM INPUT [VALUES...] (no values: query; one, or one per channel:
set; complex as 1, 0.5-0.25j), ?gain-all STREAM VALUES...|default, ?delays STREAM START-TIME
D0 D1 (each delay,delay_rate:phase,phase_rate; START-TIME Unix s, needs --sync-time), ?halt,
?sensor-list, ?sensor-value, ?sensor-sampling. A refusal is !NAME fail <the HTTP sentence>.

--wideband NAME:key=value,... (repeatable, instead of --dst): NAME is 1 to 64 of a-z 0-9 _ -.
  dst=ADDR[+N]:PORT (required), channels=N, taps=T, bits=8|4, window=hann|rect, w_cutoff=X,
  dither=SEED|off, gain=G. A key left out takes its flag's value (--channels, --taps,
  --output-bits, --window-function, --w-cutoff, --dither-seed/--no-dither, --gain). Without
  dither=, output k (0 for the first given) gets --dither-seed + k, or a random seed of its own.
  Two outputs may not share a destination ADDR:PORT.
--narrowband NAME:dst=ADDR[+N]:PORT,channels=N,decimation=8|16|32,centre=HZ,key=value,...
  (repeatable): the same keys (taps, bits, window, w_cutoff, dither, gain) and ddc_taps=L (the
  DDC filter, default 12 D). Default gain: sqrt(D) x --gain or its default (a narrowband
  channel holds 1/D of a wideband channel's noise power). The band, fs/(2D) wide, must lie
  inside 0 .. fs/2. Outputs are numbered wideband first, then narrowband, in the order given.

Started as `fgpu` (a link to this binary, as in the engine image), the engine reads katgpucbf's fgpu
command line instead (fgpu --help; docs/katgpucbf.md): katcp on --katcp-host:--katcp-port (every
interface, 7147), this HTTP API on --prometheus-port.

Logs go to stderr (RUST_LOG sets the filter, default info).

Examples:
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --dst 239.10.1.1+3:7148 \\
          --interface 10.0.0.2 --channels 4096 --adc-sample-rate 1712e6 --sync-time 1700000000
  fengine --src-pol0 127.0.0.1:7148 --src-pol1 127.0.0.1:7149 --dst 127.0.0.1:7150 \\
          --channels 1024 --taps 4 --spectra-per-heap 64 --adc-sample-rate 5e7 --backend cpu \\
          --control 127.0.0.1:0
  fengine --src-pol0 239.10.0.1+3:7148 --src-pol1 239.10.0.5+3:7148 --interface 10.0.0.2 \\
          --adc-sample-rate 1712e6 --wideband wide:dst=239.10.1.1+3:7148,channels=4096 \\
          --wideband fine:dst=239.10.2.1+7:7148,channels=32768,bits=4 \\
          --narrowband nb:dst=239.10.3.1+3:7148,channels=32768,decimation=8,centre=400e6
  fengine bench --backend cuda --channels 32768";
