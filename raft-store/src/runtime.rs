//! The async runtime openraft runs on: tokio, except that the randomness
//! openraft draws (election timeouts) comes from a per-thread generator a
//! simulation can seed, so a whole cluster's elections replay from a seed.
//!
//! Timers and tasks stay tokio's; a simulation drives tokio's clock itself.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioInstant, TokioRuntime};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static GENERATOR: RefCell<StdRng> = RefCell::new(StdRng::from_entropy());
}

/// Reseeds this thread's generator; a simulation calls it before building
/// its cluster. Production never does, and draws from the OS's entropy.
pub fn seed_thread_rng(seed: u64) {
    GENERATOR.with(|generator| *generator.borrow_mut() = StdRng::seed_from_u64(seed));
}

/// A handle to this thread's generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRng;

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        GENERATOR.with(|generator| generator.borrow_mut().next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        GENERATOR.with(|generator| generator.borrow_mut().next_u64())
    }

    fn fill_bytes(&mut self, destination: &mut [u8]) {
        GENERATOR.with(|generator| generator.borrow_mut().fill_bytes(destination))
    }

    fn try_fill_bytes(&mut self, destination: &mut [u8]) -> Result<(), rand::Error> {
        GENERATOR.with(|generator| generator.borrow_mut().try_fill_bytes(destination))
    }
}

/// Tokio with a seedable random number generator.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LodeRuntime;

impl AsyncRuntime for LodeRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ThreadRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}
