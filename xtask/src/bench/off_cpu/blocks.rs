//! 6.1b: the ping-pong's slowdowns against the floor, block by block.
//!
//! 6.1's pairs compare blocks seconds apart, with sparkprof started and
//! stopped in between, and a pair's ratio spreads by 2 to 3 %: the host's
//! speed drifts (on the reference host, consecutive 0.3 s blocks of one
//! ping-pong had a lag-1 autocorrelation of 0.5 to 0.8, and longer blocks
//! spread as much), so what cancels the drift is alternating fast. Here
//! conditions take turns every short block, in a palindrome (A B C D D C B
//! A), so that a linear drift falls equally on each, within one session:
//!
//! - a **floor session** (no sparkprof): one ping-pong, its blocks alone or
//!   with the empty program linked to `sched_switch`;
//! - a **sparkprof session**: `sparkprof record --off-cpu --pid` of one
//!   ping-pong (recorded) while a second one runs (not recorded). The
//!   second runs blocks with nothing more, with sparkprof's own
//!   `sched_switch` program (opened by its id) linked a second time, and
//!   with the empty program linked: each link adds one run per switch of
//!   the same unwatched threads, everything else equal, so their
//!   difference is what sparkprof's program costs a switch of a process it
//!   does not record beyond the empty program. The recorded ping-pong's
//!   blocks against the unrecorded one's plain blocks are what recording
//!   adds; two pairs of processes also differ by themselves (about a point
//!   either way where they land), new in every session, so that difference
//!   averages out over the sessions and is in the interval.
//!
//! Each round (a floor session, then a sparkprof session) gives one figure
//! of each, in points of the floor session's blocks alone (6.1's unit); the
//! report has their means over the rounds with a 95 % interval.

use std::{
    os::fd::{AsFd, OwnedFd},
    path::Path,
};

use anyhow::{Result, bail};

use super::{
    Mode, PingPong, SCHED_SWITCH_PROGRAM, SparkprofRun, TARGET_NOT_RECORDED_POINTS,
    TARGET_RECORDED_POINTS,
    bpf::{SchedSwitchLink, load_empty_program, open_program},
};
use crate::bench::{Interval, mean_and_sd, progress, verdict_below};

/// Round trips of a block: about 0.3 s on the reference host.
pub const BLOCK_TRIPS: u64 = 125_000;
/// Rounds per `--runs`: a round takes about 4.5 minutes here (879b1f9's
/// 24 rounds, `--runs 6`, took about 110 minutes) and its recorded over
/// the floor spreads by about 1.1 points round to round, so `--runs 6`
/// resolves about half a point.
pub const ROUNDS_PER_RUN: usize = 4;
/// Times a session runs its palindrome of conditions, counted. What
/// spreads a round's figures is the blocks' own noise (about 5 points a
/// block; "not recorded over the floor", which compares blocks of one
/// ping-pong, spreads as much as the figures that compare two), and it
/// falls as the square root of the blocks: 30 cycles a session spread
/// recorded over the floor by 1.08 points (879b1f9's section 6, 24 rounds)
/// against 3.08 with 5 (3440653's, 60 rounds). A round takes about six
/// times as long (a block here is about 0.63 s of round trips and a little
/// of its own: its links, its start), so for the same time either
/// resolves as much; 30 keeps the rounds few and the command that made
/// section 6 the one that makes it again.
pub const CYCLES: usize = 30;
/// Palindromes run first and not counted: the time just after sparkprof
/// says it records is not yet like the rest (its first drains name the
/// processes it found), and a start that falls on the first condition of
/// every forward session and the last of every backward one would weigh
/// on the figures.
const WARM_UP: usize = 1;

/// What runs beside a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Floor session: nothing.
    Alone,
    /// Floor session: the empty program.
    Empty,
    /// sparkprof session: the ping-pong sparkprof records.
    Recorded,
    /// sparkprof session: the one it does not, nothing more.
    NotRecorded,
    /// The one it does not, sparkprof's `sched_switch` program linked twice.
    NotRecordedTwice,
    /// The one it does not, the empty program linked beside sparkprof's.
    NotRecordedEmpty,
}

/// The blocks of one session, in the order they ran: what ran beside each,
/// and its seconds.
#[derive(Clone, Debug, Default)]
pub struct Session {
    pub blocks: Vec<(Block, f64)>,
}

impl Session {
    fn mean(&self, kind: Block) -> f64 {
        let times: Vec<f64> = self
            .blocks
            .iter()
            .filter(|(block, _)| *block == kind)
            .map(|&(_, seconds)| seconds)
            .collect();
        times.iter().sum::<f64>() / times.len() as f64
    }
}

/// One floor session and the sparkprof session after it.
#[derive(Clone, Debug)]
pub struct Round {
    pub floor: Session,
    pub sparkprof: Session,
}

/// One figure of every round, in points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// The empty program over nothing.
    Floor,
    /// sparkprof's program over the empty one, on a switch it does not record.
    NotRecordedOverFloor,
    /// The recorded ping-pong over the unrecorded one.
    RecordedOverNotRecorded,
    /// The sum of the last two.
    RecordedOverFloor,
}

impl Figure {
    const ALL: [Figure; 4] = [
        Figure::Floor,
        Figure::NotRecordedOverFloor,
        Figure::RecordedOverNotRecorded,
        Figure::RecordedOverFloor,
    ];

    fn label(self) -> &'static str {
        match self {
            Figure::Floor => "the floor: the empty program over nothing",
            Figure::NotRecordedOverFloor => "not recorded, over the floor",
            Figure::RecordedOverNotRecorded => "recorded, over not recorded",
            Figure::RecordedOverFloor => "recorded, over the floor",
        }
    }

    fn target(self) -> Option<f64> {
        match self {
            Figure::NotRecordedOverFloor => Some(TARGET_NOT_RECORDED_POINTS),
            Figure::RecordedOverFloor => Some(TARGET_RECORDED_POINTS),
            Figure::Floor | Figure::RecordedOverNotRecorded => None,
        }
    }
}

impl Round {
    /// `figure` of this round, in points of the floor session's blocks
    /// alone: the difference of two means of block seconds over that.
    pub fn points(&self, figure: Figure) -> f64 {
        let alone = self.floor.mean(Block::Alone);
        let over = |session: &Session, a: Block, b: Block| {
            100.0 * (session.mean(a) - session.mean(b)) / alone
        };
        let s = &self.sparkprof;
        match figure {
            Figure::Floor => over(&self.floor, Block::Empty, Block::Alone),
            Figure::NotRecordedOverFloor => {
                over(s, Block::NotRecordedTwice, Block::NotRecordedEmpty)
            }
            Figure::RecordedOverNotRecorded => over(s, Block::Recorded, Block::NotRecorded),
            Figure::RecordedOverFloor => {
                self.points(Figure::NotRecordedOverFloor)
                    + self.points(Figure::RecordedOverNotRecorded)
            }
        }
    }
}

/// `rounds` rounds, each a floor session and a sparkprof session.
pub fn measure(sparkprof: &Path, pingpong: &Path, dir: &Path, rounds: usize) -> Result<Vec<Round>> {
    let mut all = Vec::new();
    for round in 0..rounds {
        // Every other round runs its palindromes the other way round.
        let reversed = round % 2 == 1;
        let floor = floor_session(pingpong, reversed)?;
        let sparkprof = sparkprof_session(sparkprof, pingpong, dir, reversed)?;
        let result = Round { floor, sparkprof };
        progress(&format!(
            "[offcpu] blocks, round {}/{rounds}: floor {:+.2}, not recorded over it {:+.2}, recorded over not recorded {:+.2} points",
            round + 1,
            result.points(Figure::Floor),
            result.points(Figure::NotRecordedOverFloor),
            result.points(Figure::RecordedOverNotRecorded),
        ));
        all.push(result);
    }
    Ok(all)
}

/// `kinds` forwards then backwards, [`WARM_UP`] plus [`CYCLES`] times (or
/// backwards first).
fn palindromes(kinds: &[Block], reversed: bool) -> Vec<Block> {
    let mut forth = kinds.to_vec();
    if reversed {
        forth.reverse();
    }
    let back: Vec<Block> = forth.iter().rev().copied().collect();
    let once: Vec<Block> = forth.into_iter().chain(back).collect();
    once.repeat(WARM_UP + CYCLES)
}

/// Whether the block at `index` of a session of `kinds` conditions is
/// counted (not one of the warm-up's).
fn counted(index: usize, kinds: usize) -> bool {
    index >= 2 * kinds * WARM_UP
}

/// Runs one block of `pingpong` with `link` (if any) there from before its
/// first round trip to after its last; its seconds.
fn block(pingpong: &mut PingPong, link: Option<(&OwnedFd, bool)>) -> Result<f64> {
    let link = link
        .map(|(program, btf)| SchedSwitchLink::attach(program.as_fd(), btf))
        .transpose()?;
    pingpong.work.go()?;
    let seconds = pingpong.work.elapsed()?;
    drop(link);
    Ok(seconds)
}

fn floor_session(binary: &Path, reversed: bool) -> Result<Session> {
    let order = palindromes(&[Block::Alone, Block::Empty], reversed);
    let mut pingpong = PingPong::start_blocks(binary, BLOCK_TRIPS, order.len() as u32)?;
    let empty = load_empty_program()?;
    let mut session = Session::default();
    for (index, kind) in order.into_iter().enumerate() {
        let link = (kind == Block::Empty).then_some((&empty, false));
        let seconds = block(&mut pingpong, link)?;
        if counted(index, 2) {
            session.blocks.push((kind, seconds));
        }
    }
    pingpong.work.exit()?;
    Ok(session)
}

fn sparkprof_session(
    sparkprof: &Path,
    binary: &Path,
    dir: &Path,
    reversed: bool,
) -> Result<Session> {
    let order = palindromes(
        &[
            Block::Recorded,
            Block::NotRecorded,
            Block::NotRecordedTwice,
            Block::NotRecordedEmpty,
        ],
        reversed,
    );
    let count = |wanted: fn(Block) -> bool| order.iter().filter(|&&b| wanted(b)).count() as u32;
    let mut recorded =
        PingPong::start_blocks(binary, BLOCK_TRIPS, count(|b| b == Block::Recorded))?;
    let mut unrecorded =
        PingPong::start_blocks(binary, BLOCK_TRIPS, count(|b| b != Block::Recorded))?;
    let recorder = SparkprofRun::start(sparkprof, dir, Mode::OffCpu, recorded.pids)?;
    let own = open_program(recorder.pid(), SCHED_SWITCH_PROGRAM)?;
    let empty = load_empty_program()?;
    let mut session = Session::default();
    for (index, &kind) in order.iter().enumerate() {
        let (pingpong, link) = match kind {
            Block::Recorded => (&mut recorded, None),
            Block::NotRecordedTwice => (&mut unrecorded, Some((&own, true))),
            Block::NotRecordedEmpty => (&mut unrecorded, Some((&empty, false))),
            _ => (&mut unrecorded, None),
        };
        let seconds = block(pingpong, link)?;
        if counted(index, 4) {
            session.blocks.push((kind, seconds));
        }
    }
    drop(own);
    let stats = recorder.stop()?;
    // Two switch-outs of each process per round trip of each recorded block.
    let recorded_trips = BLOCK_TRIPS * u64::from(count(|b| b == Block::Recorded));
    if stats.offcpu_switches < recorded_trips {
        bail!(
            "sparkprof saw {} switch-outs of the recorded ping-pong over {recorded_trips} round trips: it did not record it",
            stats.offcpu_switches
        );
    }
    recorded.work.exit()?;
    unrecorded.work.exit()?;
    Ok(session)
}

/// 6.1b's text and tables.
pub fn markdown(rounds: &[Round]) -> String {
    let mut text = format!(
        "\n**6.1b Against the floor, block by block.** {} rounds, each a floor session and a \
         sparkprof session of ping-pongs as in 6.1, in blocks of {BLOCK_TRIPS} round trips \
         (about 0.3 s) whose conditions take turns every block in a palindrome (A B C D D C B A, \
         {CYCLES} times counted after {WARM_UP} not; backwards first every other round), so that \
         a drift of the host's speed falls equally on each. Floor session (no sparkprof): one ping-pong, blocks alone or with \
         6.1's empty program linked to `sched_switch`. sparkprof session: `sparkprof record \
         --off-cpu --pid PARENT --pid CHILD` of one ping-pong (recorded) while a second runs \
         (not recorded); the second runs blocks with nothing more, with sparkprof's own \
         `sched_switch` program (opened by its id) linked a second time, and with the empty \
         program linked: both add one program run per switch of the same threads, everything \
         else equal, so their difference is what sparkprof's program costs a switch it does not \
         record beyond the empty program. Recorded over not recorded compares two ping-pongs: \
         two pairs of processes also differ by themselves by about a point either way, new in \
         every session, which averages out over the rounds and is in the interval. Figures are \
         differences of mean block seconds in points of the floor session's blocks alone (6.1's \
         unit); recorded over the floor is, per round, recorded over not recorded plus not \
         recorded over the floor. The interval is the mean's over the rounds (Student's t).\n\n\
         | figure | points, mean of the rounds (95 % interval) | rounds' standard deviation | target (issue 19) |\n\
         |---|--:|--:|---|\n",
        rounds.len()
    );
    for figure in Figure::ALL {
        let values: Vec<f64> = rounds.iter().map(|r| r.points(figure)).collect();
        let interval = Interval::of(&values);
        let sd = mean_and_sd(&values)
            .1
            .map_or("–".to_owned(), |sd| format!("{sd:.2}"));
        let target = match figure.target() {
            None => "–".to_owned(),
            Some(target) => format!(
                "≤ {target} points: {}",
                verdict_below(interval.low(), interval.high(), target, || format!(
                    "± {:.2} points with {} rounds: more rounds, `--runs N`",
                    interval.half, interval.n
                ))
            ),
        };
        let range = match interval.half.is_finite() {
            true => format!("{:+.2} – {:+.2}", interval.low(), interval.high()),
            false => "one round: none".to_owned(),
        };
        text += &format!(
            "| {} | {:+.2} ({range}) | {sd} | {target} |\n",
            figure.label(),
            interval.mean,
        );
    }
    text += "\n| round | the floor | not recorded over the floor | recorded over not recorded | recorded over the floor |\n|--:|--:|--:|--:|--:|\n";
    for (index, round) in rounds.iter().enumerate() {
        text += &format!("| {} |", index + 1);
        for figure in Figure::ALL {
            text += &format!(" {:+.2} |", round.points(figure));
        }
        text += "\n";
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--only`'s usage line says how many rounds of blocks a run makes:
    /// this constant's number, not one written beside it.
    #[test]
    fn usage_says_the_rounds_a_run_makes() {
        let rounds = format!("{ROUNDS_PER_RUN} rounds of ping-pong blocks per run");
        assert!(
            crate::bench::USAGE.contains(&rounds),
            "the usage does not say {rounds:?}"
        );
    }

    /// A round whose blocks take these seconds, each kind twice.
    fn round(floor: [f64; 2], sparkprof: [f64; 4]) -> Round {
        let session = |kinds: &[Block], seconds: &[f64]| Session {
            blocks: kinds
                .iter()
                .copied()
                .zip(seconds.iter().copied())
                .cycle()
                .take(2 * kinds.len())
                .collect(),
        };
        Round {
            floor: session(&[Block::Alone, Block::Empty], &floor),
            sparkprof: session(
                &[
                    Block::Recorded,
                    Block::NotRecorded,
                    Block::NotRecordedTwice,
                    Block::NotRecordedEmpty,
                ],
                &sparkprof,
            ),
        }
    }

    #[test]
    fn palindromes_balance_every_condition_and_turn_round() {
        let kinds = [Block::Alone, Block::Empty];
        let order = palindromes(&kinds, false);
        assert_eq!(order.len(), 4 * (WARM_UP + CYCLES));
        assert!(!counted(4 * WARM_UP - 1, 2) && counted(4 * WARM_UP, 2));
        assert_eq!(
            &order[..4],
            &[Block::Alone, Block::Empty, Block::Empty, Block::Alone]
        );
        let back = palindromes(&kinds, true);
        assert_eq!(
            &back[..4],
            &[Block::Empty, Block::Alone, Block::Alone, Block::Empty]
        );
    }

    #[test]
    fn figures_are_points_of_the_blocks_alone_and_judged_by_their_interval() {
        // Alone 2 s, the empty program 2.1 s: +5 points. Not recorded 2.16,
        // twice 2.18, with the empty program 2.17: +0.5 over the floor;
        // recorded 2.2: +2 over not recorded; +2.5 over the floor.
        let steady = round([2.0, 2.1], [2.2, 2.16, 2.18, 2.17]);
        assert!((steady.points(Figure::Floor) - 5.0).abs() < 1e-9);
        assert!((steady.points(Figure::NotRecordedOverFloor) - 0.5).abs() < 1e-9);
        assert!((steady.points(Figure::RecordedOverNotRecorded) - 2.0).abs() < 1e-9);
        assert!((steady.points(Figure::RecordedOverFloor) - 2.5).abs() < 1e-9);
        let text = markdown(&[steady.clone(), steady.clone(), steady.clone()]);
        assert!(
            text.contains(
                "| not recorded, over the floor | +0.50 (+0.50 – +0.50) | 0.00 | ≤ 1 points: met |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| recorded, over the floor | +2.50 (+2.50 – +2.50) | 0.00 | ≤ 3 points: met |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| 3 | +5.00 | +0.50 | +2.00 | +2.50 |"),
            "{text}"
        );
        // Rounds that disagree leave the target inside the interval.
        let noisy = round([2.0, 2.1], [2.2, 2.16, 2.2, 2.17]);
        let text = markdown(&[steady, noisy]);
        assert!(text.contains("≤ 1 points: not resolved here (± "), "{text}");
    }
}
