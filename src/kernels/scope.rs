//! The thread-local scopes of the kernels' ambient settings (the products' precision, AMX on or
//! off): one helper both settle with, so that neither module reaches into the other for it.

use std::cell::Cell;

/// Run `f` with the thread-local scope `key` set to `v`, the previous value restored
/// afterwards, also on a panic: the shape of every ambient setting of the kernels
/// (`precision::with`, `gemm::amx::with`).
pub(crate) fn scoped<T: Copy + 'static, R>(key: &'static std::thread::LocalKey<Cell<Option<T>>>, v: T, f: impl FnOnce() -> R) -> R {
    struct Restore<T: 'static>(&'static std::thread::LocalKey<Cell<Option<T>>>, Option<T>);
    impl<T: 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.set(self.1.take());
        }
    }
    let _restore = Restore(key, key.replace(Some(v)));
    f()
}
