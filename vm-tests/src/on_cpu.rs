//! The on-CPU sampler (`sample_on_cpu` on the cpu-clock event of every CPU):
//! its rate, its user and kernel stacks, and the double-buffered drain.

use std::{
    thread,
    time::{Duration, Instant},
};

use sparkprof::collect::{Collector, RawStack, SampleKind};

use crate::{
    FREQUENCY_HZ, KERNEL_SPACE, drain, on_cpu_samples, sum,
    workload::{self, Worker},
};

/// Spinning thread: the rate and where its user stacks end; a thread
/// reading /dev/zero: kernel stacks.
pub fn check_on_cpu(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    let spin = workload::function_range(workload::SPIN_SYMBOL, workload::spin_address())?;
    drain(collector)?;
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    let reader = Worker::spawn(workload::read_zeroes);
    let started = Instant::now();
    thread::sleep(Duration::from_secs(2));
    let drained = drain(collector)?;
    let elapsed = started.elapsed().as_secs_f64();
    let (spinner_tid, reader_tid) = (spinner.tid, reader.tid);
    spinner.finish();
    reader.finish();

    let total = sum(on_cpu_samples(&drained, spinner_tid).map(|s| s.count));
    let in_spin = sum(on_cpu_samples(&drained, spinner_tid)
        .filter(|s| matches!(&s.user, RawStack::Frames { ips, .. } if spin.contains(&ips[0])))
        .map(|s| s.count));
    // A stack whose hash bucket another stack holds is not stored
    // (`bpf_get_stackid`'s EEXIST, counted in `user_stacks_lost`); its
    // samples are still counted, without it. One of the spin loop's few
    // stacks colliding took a fifth of its samples once: they are lost, not
    // wrong, and the leaf is checked in the stacks stored.
    let collided = sum(on_cpu_samples(&drained, spinner_tid)
        .filter(|s| matches!(s.user, RawStack::Lost(err) if err == -libc::EEXIST))
        .map(|s| s.count));
    let expected = FREQUENCY_HZ as f64 * elapsed;
    if (total as f64) < 0.3 * expected || (total as f64) > 1.3 * expected {
        return Err(format!(
            "{total} samples of the spinning thread in {elapsed:.2} s at {FREQUENCY_HZ} Hz \
             (expected about {expected:.0})"
        ));
    }
    if 2 * collided > total {
        return Err(format!(
            "{collided} of {total} samples of the spinning thread lost their user stack to \
             stack-map collisions"
        ));
    }
    let stored = total - collided;
    if (in_spin as f64) < 0.9 * stored as f64 {
        return Err(format!(
            "only {in_spin} of {stored} samples of the spinning thread with a user stack have \
             their user leaf in {} [{:#x}, {:#x})",
            workload::SPIN_SYMBOL,
            spin.start,
            spin.end
        ));
    }
    let reader_total = sum(on_cpu_samples(&drained, reader_tid).map(|s| s.count));
    let in_kernel = sum(on_cpu_samples(&drained, reader_tid)
        .filter(|s| {
            matches!(&s.kernel, RawStack::Frames { ips, .. }
                if ips.iter().all(|&ip| ip >= KERNEL_SPACE))
        })
        .map(|s| s.count));
    if in_kernel < 5 {
        return Err(format!(
            "{in_kernel} of {reader_total} samples of the /dev/zero reader have a kernel stack"
        ));
    }
    Ok(format!(
        "{total} samples of the spinning thread in {elapsed:.2} s (expected {expected:.0}), \
         {in_spin} with the user leaf in {} ({collided} without a user stack: collisions); \
         {in_kernel} of {reader_total} samples of the /dev/zero reader with kernel stacks",
        workload::SPIN_SYMBOL
    ))
}

/// A drain hands over what the sampler counted for this process and
/// nothing of any other (the collector targets this process), then the
/// buffer is clear: once the spinning thread stops, the next two drains
/// hold at most a few late samples of it. The statistics account for every
/// sample the program ran for: counted, filtered out or idle.
pub fn check_drain(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let before = collector.stats();
    drain(collector)?;
    let logged_before = collector.logged_samples();
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    thread::sleep(Duration::from_secs(1));
    let drained = drain(collector)?;
    let tid = spinner.tid;
    spinner.finish();
    let later = [drain(collector)?, drain(collector)?];
    let stats = collector.stats();
    let logged = collector.logged_samples() - logged_before;

    let counted = sum(on_cpu_samples(&drained, tid).map(|s| s.count));
    let leftover = sum(later
        .iter()
        .flat_map(|d| on_cpu_samples(d, tid))
        .map(|s| s.count));
    let every_drain = || std::iter::once(&drained).chain(&later);
    if let Some(stranger) = every_drain()
        .flat_map(|d| &d.samples)
        .find(|s| s.tgid != pid)
    {
        return Err(format!(
            "a sample of process {} ({}): the collector targets {pid} only",
            stranger.tgid, stranger.comm
        ));
    }
    if counted < FREQUENCY_HZ / 3 || leftover > 5 {
        return Err(format!(
            "{counted} samples of the spinning thread in its second, {leftover} after it stopped \
             (at most 5 late ones expected)"
        ));
    }
    let on_cpu_total = sum(every_drain()
        .flat_map(|d| &d.samples)
        .filter(|s| s.kind == SampleKind::OnCpu)
        .map(|s| s.count));
    let ran = stats.samples - before.samples;
    let accounted = on_cpu_total + (stats.filtered - before.filtered) + (stats.idle - before.idle);
    // A run of the program counts itself in the statistics before it
    // counts its sample: one that was running on another CPU when `before`
    // was read is in `before`, and its sample in a drain after. At most one
    // per CPU. (Seen once on 6.12: 203 runs, 204 accounted.)
    let in_flight = thread::available_parallelism().map_or(1, |n| n.get() as u64);
    if ran + in_flight < accounted || stats.dropped_count_map_full != before.dropped_count_map_full
    {
        return Err(format!(
            "the program ran {ran} times but {accounted} samples are counted, filtered or idle \
             (at most {in_flight} runs in flight when counting began); statistics {stats:?}"
        ));
    }
    // The spinner's second is more samples than its CPU's log holds: the
    // log takes the first, the count map the rest, and a drain adds both.
    if logged == 0 || logged >= on_cpu_total {
        return Err(format!(
            "{logged} of the {on_cpu_total} samples counted came from the sample logs: expected \
             some, and the rest from the count map (the logs hold 64 a CPU)"
        ));
    }
    Ok(format!(
        "{counted} samples of the spinning thread in 1 s, {leftover} after it stopped; only this \
         process's samples; {ran} program runs account for the {on_cpu_total} counted ({logged} \
         from the sample logs, the rest from the count map)"
    ))
}
