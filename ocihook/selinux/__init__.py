"""SELinux support: labels at run time, relabeling, status (policy module lives in selinux/)."""
