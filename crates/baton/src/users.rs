//! Local user accounts: names for uids and the uid, gid, groups and home of a user, through the
//! C library's reentrant lookups so that NSS sources (LDAP, sssd) work as they do for `id`.

use std::collections::HashMap;
use std::ffi::{CStr, CString};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: String,
}

/// The account with this uid, if the system knows it.
pub fn by_uid(uid: u32) -> Option<Account> {
    lookup(|pwd, buf, result| unsafe {
        libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result)
    })
}

/// The account with this name, if the system knows it.
pub fn by_name(name: &str) -> Option<Account> {
    let name = CString::new(name).ok()?;
    lookup(|pwd, buf, result| unsafe {
        libc::getpwnam_r(name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result)
    })
}

/// A name for a uid: the account name, or the number when it has none. Remembered for a
/// minute: the daemon names the caller of nearly every request, and each lookup reads the whole
/// of /etc/passwd (or asks LDAP).
pub fn name_of(uid: u32) -> String {
    const KEPT: std::time::Duration = std::time::Duration::from_secs(60);
    type Names = HashMap<u32, (String, std::time::Instant)>;
    static NAMES: std::sync::LazyLock<std::sync::Mutex<Names>> =
        std::sync::LazyLock::new(Default::default);
    let now = std::time::Instant::now();
    if let Some((name, at)) = NAMES.lock().unwrap_or_else(|p| p.into_inner()).get(&uid)
        && now.duration_since(*at) < KEPT
    {
        return name.clone();
    }
    let name = by_uid(uid)
        .map(|a| a.name)
        .unwrap_or_else(|| uid.to_string());
    NAMES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid, (name.clone(), now));
    name
}

fn lookup(
    call: impl Fn(&mut libc::passwd, &mut Vec<libc::c_char>, &mut *mut libc::passwd) -> libc::c_int,
) -> Option<Account> {
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    loop {
        // SAFETY: passwd is plain old data; getpw*_r fills it with pointers into `buf`.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pwd, &mut buf, &mut result);
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: on success the string fields point to NUL-terminated strings inside `buf`.
        let text =
            |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        return Some(Account {
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            name: text(pwd.pw_name),
            home: text(pwd.pw_dir),
        });
    }
}

/// The name of group `gid`, if the system knows it.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    loop {
        // SAFETY: group is plain old data; getgrgid_r fills it with pointers into `buf`.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc =
            unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: on success gr_name points to a NUL-terminated string inside `buf`.
        return Some(
            unsafe { CStr::from_ptr(grp.gr_name) }
                .to_string_lossy()
                .into_owned(),
        );
    }
}

/// The supplementary groups of an account (as `initgroups` would set them).
pub fn groups_of(account: &Account) -> Vec<u32> {
    let Ok(name) = CString::new(account.name.clone()) else {
        return vec![account.gid];
    };
    let mut count: libc::c_int = 64;
    loop {
        let mut groups: Vec<libc::gid_t> = vec![0; count as usize];
        let mut n = count;
        // SAFETY: `groups` has room for `n` entries; getgrouplist writes at most that many and
        // reports the real count in `n`.
        let rc =
            unsafe { libc::getgrouplist(name.as_ptr(), account.gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        if n <= count || count > 65_536 {
            return vec![account.gid];
        }
        count = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known() {
        let root = by_uid(0).expect("uid 0 exists");
        assert_eq!(root.name, "root");
        assert_eq!(root.gid, 0);
        assert!(groups_of(&root).contains(&0));
        assert_eq!(name_of(4_000_000_000), "4000000000");
        assert_eq!(by_name("root").map(|a| a.uid), Some(0));
        assert_eq!(by_name("no-such-user-for-baton"), None);
    }
}
