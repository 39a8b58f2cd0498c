//! Classification and driver matching, on realistic command lines.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};

use super::classify::{ProcessFacts, classify, classify_pid, is_local_master};
use super::driver::{
    DriverLink, ListeningSocket, driver_app_id, listening_sockets, match_driver, parse_driver_url,
    parse_proc_net_tcp,
};
use super::types::{Role, SparkProcess};

fn words(cmdline: &str) -> Vec<String> {
    cmdline.split_whitespace().map(str::to_owned).collect()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn spark(role: Role, app_id: Option<&str>, executor_id: Option<&str>) -> SparkProcess {
    SparkProcess {
        role,
        app_id: app_id.map(str::to_owned),
        executor_id: executor_id.map(str::to_owned),
    }
}

fn classify_cmd(cmdline: &str) -> SparkProcess {
    classify(&words(cmdline), &[], &[])
}

const STANDALONE_EXECUTOR: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /opt/spark/conf/:/opt/spark/jars/* -Xmx1024M -Dspark.driver.port=40123 -XX:+PreserveFramePointer -XX:+IgnoreUnrecognizedVMOptions --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED -Djdk.reflect.useDirectMethodHandle=false org.apache.spark.executor.CoarseGrainedExecutorBackend --driver-url spark://CoarseGrainedScheduler@10.0.0.5:40123 --executor-id 3 --hostname 10.0.0.6 --cores 2 --app-id app-20240101120000-0007 --worker-url spark://Worker@10.0.0.6:35000 --resourceProfileId 0";

const YARN_EXECUTOR: &str = "/usr/lib/jvm/java-11-openjdk/bin/java -server -Xmx4096m -Djava.io.tmpdir=/data/yarn/local/usercache/etl/appcache/application_1700000000000_0042/container_e05_1700000000000_0042_01_000003/tmp -Dspark.driver.port=36615 -Dspark.yarn.app.container.log.dir=/data/yarn/logs/application_1700000000000_0042/container_e05_1700000000000_0042_01_000003 -XX:OnOutOfMemoryError=kill%20%p org.apache.spark.executor.YarnCoarseGrainedExecutorBackend --driver-url spark://CoarseGrainedScheduler@gateway-1.example.com:36615 --executor-id 2 --hostname worker-7.example.com --cores 4 --app-id application_1700000000000_0042 --resourceProfileId 0 --user-class-path file:/data/yarn/local/usercache/etl/appcache/application_1700000000000_0042/container_e05_1700000000000_0042_01_000003/__app__.jar";

const K8S_EXECUTOR: &str = "/opt/java/openjdk/bin/java -Dspark.driver.port=7078 -Dspark.driver.blockManager.port=7079 -Xms1024m -Xmx1024m -cp /opt/spark/conf::/opt/spark/jars/*: org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend --driver-url=spark://CoarseGrainedScheduler@spark-pi-3c4e6d8f-driver-svc.default.svc:7078 --executor-id=5 --cores 1 --app-id=spark-9f2b0c1d5e6a4b7c8d9e0f1a2b3c4d5e --hostname 10.244.1.17 --resourceProfileId 0 --podName spark-pi-3c4e6d8f-exec-5";

const LOCAL_DRIVER: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /opt/spark/conf/:/opt/spark/jars/* -Xmx1g -XX:+PreserveFramePointer org.apache.spark.deploy.SparkSubmit --master local[2] --conf spark.driver.memory=1g --name wordcount --class org.example.WordCount /opt/jobs/wordcount.jar /data/in /data/out";

const PYSPARK_DRIVER: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /usr/local/lib/python3.11/dist-packages/pyspark/conf:/usr/local/lib/python3.11/dist-packages/pyspark/jars/* -Xmx1g -XX:+IgnoreUnrecognizedVMOptions org.apache.spark.deploy.SparkSubmit --conf spark.master=local[*] --conf spark.app.name=test pyspark-shell";

const CLUSTER_DRIVER: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /opt/spark/conf/:/opt/spark/jars/* -Xmx2g org.apache.spark.deploy.SparkSubmit --master spark://10.0.0.5:7077 --deploy-mode client --class org.example.Etl /opt/jobs/etl.jar --master local[8]";

#[test]
fn standalone_executor() {
    assert_eq!(
        classify_cmd(STANDALONE_EXECUTOR),
        spark(Role::Executor, Some("app-20240101120000-0007"), Some("3"))
    );
}

#[test]
fn yarn_executor() {
    assert_eq!(
        classify_cmd(YARN_EXECUTOR),
        spark(
            Role::Executor,
            Some("application_1700000000000_0042"),
            Some("2")
        )
    );
}

#[test]
fn kubernetes_executor_flags_with_equals_and_env_fallback() {
    assert_eq!(
        classify_cmd(K8S_EXECUTOR),
        spark(
            Role::Executor,
            Some("spark-9f2b0c1d5e6a4b7c8d9e0f1a2b3c4d5e"),
            Some("5")
        )
    );
    // Older images pass the IDs only in the environment.
    let argv = words(
        "/opt/java/openjdk/bin/java -Xmx1g -cp /opt/spark/jars/* org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend --driver-url spark://CoarseGrainedScheduler@driver-svc:7078 --cores 1",
    );
    let environ = env(&[
        ("SPARK_EXECUTOR_ID", "9"),
        ("SPARK_APPLICATION_ID", "spark-0123"),
        ("SPARK_EXECUTOR_POD_NAME", "job-exec-9"),
    ]);
    assert_eq!(
        classify(&argv, &environ, &[]),
        spark(Role::Executor, Some("spark-0123"), Some("9"))
    );
}

#[test]
fn drivers() {
    assert_eq!(
        classify_cmd(LOCAL_DRIVER),
        spark(Role::Driver, None, Some("driver"))
    );
    assert_eq!(
        classify_cmd(PYSPARK_DRIVER),
        spark(Role::Driver, None, Some("driver"))
    );
    // `--master local[8]` after the application jar is the application's
    // own argument, not spark-submit's.
    assert_eq!(
        classify_cmd(CLUSTER_DRIVER),
        spark(Role::Driver, None, None)
    );
    // --master wins over spark.master; `--master=` works too.
    assert_eq!(
        classify_cmd(
            "java -cp x org.apache.spark.deploy.SparkSubmit --conf spark.master=local[2] --master=yarn app.jar"
        ),
        spark(Role::Driver, None, None)
    );
    // local-cluster starts real executors; the driver runs none itself.
    assert_eq!(
        classify_cmd(
            "java -cp x org.apache.spark.deploy.SparkSubmit --master local-cluster[2,1,1024] --verbose app.jar"
        ),
        spark(Role::Driver, None, None)
    );
    // spark.app.id set explicitly, and $MASTER as the last resort.
    let argv = words(
        "java -cp x -Dspark.app.id=my-app org.apache.spark.deploy.SparkSubmit --class A app.jar",
    );
    assert_eq!(
        classify(&argv, &env(&[("MASTER", "local")]), &[]),
        spark(Role::Driver, Some("my-app"), Some("driver"))
    );
    // Cluster deploy mode only submits: the driver runs elsewhere.
    assert_eq!(
        classify_cmd(
            "java -cp x org.apache.spark.deploy.SparkSubmit --master yarn --deploy-mode cluster app.jar"
        )
        .role,
        Role::OtherJvm
    );
    // YARN cluster mode: the driver is the application master.
    let argv = words(
        "/usr/bin/java -server -Xmx2g org.apache.spark.deploy.yarn.ApplicationMaster --class org.example.Etl --jar etl.jar --properties-file /x/__spark_conf__/__spark_conf__.properties",
    );
    assert_eq!(
        classify(
            &argv,
            &env(&[("CONTAINER_ID", "container_e05_1700000000000_0042_01_000001")]),
            &[]
        ),
        spark(Role::Driver, Some("application_1700000000000_0042"), None)
    );
    // Standalone cluster mode: the worker runs the driver in DriverWrapper.
    assert_eq!(
        classify_cmd(
            "java -cp /opt/spark/jars/* -Xmx1g -Dspark.app.name=etl org.apache.spark.deploy.worker.DriverWrapper spark://Worker@10.0.0.6:35000 /opt/jobs/etl.jar org.example.Etl"
        )
        .role,
        Role::Driver
    );
}

#[test]
fn local_masters() {
    for m in ["local", "local[1]", "local[*]", "local[4,3]", "local[*,2]"] {
        assert!(is_local_master(m), "{m}");
    }
    for m in [
        "local-cluster[2,1,1024]",
        "yarn",
        "spark://h:7077",
        "k8s://https://k:6443",
        "localhost",
        "",
    ] {
        assert!(!is_local_master(m), "{m}");
    }
}

#[test]
fn standalone_daemons_and_other_jvms() {
    assert_eq!(
        classify_cmd(
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /opt/spark/conf/:/opt/spark/jars/* -Xmx1g org.apache.spark.deploy.master.Master --host 10.0.0.5 --port 7077 --webui-port 8080"
        ),
        spark(Role::Master, None, None)
    );
    assert_eq!(
        classify_cmd(
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /opt/spark/conf/:/opt/spark/jars/* -Xmx1g org.apache.spark.deploy.worker.Worker --webui-port 8081 spark://10.0.0.5:7077"
        ),
        spark(Role::Worker, None, None)
    );
    for other in [
        "java -cp /opt/spark/jars/* -Xmx1g org.apache.spark.deploy.history.HistoryServer",
        "/usr/bin/java -jar /opt/app/server.jar --port 8080",
        "java -version",
        "java --module-path mods -m com.example/com.example.Main",
        "java -cp org.apache.spark.deploy.master.Master Main",
    ] {
        assert_eq!(classify_cmd(other).role, Role::OtherJvm, "{other}");
    }
    // A wrapper shell that mentions a backend is not the backend.
    let shell = vec![
        "/bin/bash".to_owned(),
        "-c".to_owned(),
        format!("{YARN_EXECUTOR} 1>stdout 2>stderr"),
    ];
    assert_eq!(classify(&shell, &[], &[]).role, Role::Other);
    // A launcher renamed with `exec -a` still runs a Spark main class.
    assert_eq!(
        classify_cmd(&STANDALONE_EXECUTOR.replacen(
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
            "spark-executor",
            1
        ))
        .role,
        Role::Executor
    );
    assert_eq!(classify_cmd("/usr/sbin/sshd -D").role, Role::Other);
    assert_eq!(classify(&[], &[], &[]).role, Role::Other);
}

#[test]
fn pyspark_daemon_and_workers_inherit_their_executor() {
    let executor = classify_cmd(STANDALONE_EXECUTOR);
    let daemon_argv = words("/usr/bin/python3 -m pyspark.daemon");
    let daemon = classify(&daemon_argv, &[], std::slice::from_ref(&executor));
    assert_eq!(
        daemon,
        spark(
            Role::PysparkDaemon,
            Some("app-20240101120000-0007"),
            Some("3")
        )
    );
    // Workers are forked: same command line, the daemon as parent.
    let worker = classify(&daemon_argv, &[], &[daemon.clone(), executor.clone()]);
    assert_eq!(
        worker,
        spark(
            Role::PysparkWorker,
            Some("app-20240101120000-0007"),
            Some("3")
        )
    );
    // spark.python.use.daemon=false: the executor starts workers itself.
    let worker = classify(
        &words("python3.11 -u -m pyspark.worker"),
        &[],
        std::slice::from_ref(&executor),
    );
    assert_eq!(worker.role, Role::PysparkWorker);
    assert_eq!(worker.executor_id.as_deref(), Some("3"));
    // Local mode: the daemon is the driver's child, executor ID "driver".
    let driver = classify_cmd(PYSPARK_DRIVER);
    let daemon = classify(
        &words("/opt/conda/bin/python -mpyspark.daemon"),
        &[],
        &[driver],
    );
    assert_eq!(daemon, spark(Role::PysparkDaemon, None, Some("driver")));
    // With the chain unreadable, Kubernetes' environment still names them.
    let daemon = classify(
        &words("python3 -m pyspark.daemon"),
        &env(&[
            ("SPARK_EXECUTOR_ID", "4"),
            ("SPARK_APPLICATION_ID", "spark-abc"),
        ]),
        &[],
    );
    assert_eq!(
        daemon,
        spark(Role::PysparkDaemon, Some("spark-abc"), Some("4"))
    );
    // Spark 4's specialised workers.
    assert_eq!(
        classify(
            &words("python3 -m pyspark.sql.worker.analyze_udtf"),
            &[],
            &[]
        )
        .role,
        Role::PysparkWorker
    );
}

#[test]
fn plain_python() {
    for cmd in [
        "python3 /home/u/job.py",
        "/usr/bin/python3.11 -c import pyspark.daemon",
        "python3 -m http.server",
        "python3 job.py -m pyspark.daemon",
        "python",
        "python3.13t -X perf -W ignore -m mymodule",
    ] {
        assert_eq!(classify_cmd(cmd), spark(Role::Python, None, None), "{cmd}");
    }
    // A python child of an executor that is not PySpark gets no IDs.
    let executor = classify_cmd(STANDALONE_EXECUTOR);
    assert_eq!(
        classify(&words("python3 helper.py"), &[], &[executor]).role,
        Role::Python
    );
    for not_python in ["python3-config --libs", "ipython", "pythonw"] {
        assert_eq!(classify_cmd(not_python).role, Role::Other, "{not_python}");
    }
}

#[test]
fn classifies_this_process_and_missing_ones() {
    let me = std::process::id();
    let facts = ProcessFacts::read(me).unwrap();
    assert_eq!(facts.pid, me);
    assert!(facts.ppid.is_some());
    assert!(!facts.argv.is_empty());
    // The test binary is no Spark process.
    assert_eq!(classify_pid(me), SparkProcess::other());
    assert_eq!(classify_pid(u32::MAX - 1), SparkProcess::other());
    assert!(ProcessFacts::read(u32::MAX - 1).is_none());
    // Kernel threads have no command line.
    if let Some(kthreadd) = std::fs::read_to_string("/proc/2/comm").ok()
        && kthreadd.trim() == "kthreadd"
    {
        assert_eq!(classify_pid(2), SparkProcess::other());
    }
}

#[test]
fn classifies_a_live_pyspark_daemon_and_its_forked_worker() {
    use std::io::BufRead;
    // A stand-in `pyspark.daemon` module that forks one "worker", as the
    // real daemon does, and prints the worker's pid once it has; the worker
    // exits when its parent does. The pids come from the daemon itself, not
    // from polling /proc: `python3` may be a shim (pyenv's is a shell script
    // whose subshells are children of the same pid before it execs Python).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pyspark")).unwrap();
    std::fs::write(dir.path().join("pyspark/__init__.py"), "").unwrap();
    std::fs::write(
        dir.path().join("pyspark/daemon.py"),
        "import os, time\nparent = os.getpid()\nworker = os.fork()\nif worker == 0:\n    while os.getppid() == parent:\n        time.sleep(0.05)\nelse:\n    print(parent, worker, flush=True)\n    time.sleep(60)\n",
    )
    .unwrap();
    let mut daemon = std::process::Command::new("python3")
        .args(["-m", "pyspark.daemon"])
        .env("PYTHONPATH", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is required by this test (the machine has one)");
    let mut line = String::new();
    std::io::BufReader::new(daemon.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    let roles: Vec<SparkProcess> = pids.iter().map(|&pid| classify_pid(pid)).collect();
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(pids.len(), 2, "the daemon printed {line:?}");
    // Whatever ran first under the spawned pid, it is the daemon now.
    assert_eq!(pids[0], daemon.id());
    assert_eq!(roles[0], spark(Role::PysparkDaemon, None, None));
    assert_eq!(roles[1], spark(Role::PysparkWorker, None, None));
}

#[test]
fn driver_urls() {
    assert_eq!(
        parse_driver_url("spark://CoarseGrainedScheduler@10.0.0.5:40123"),
        Some(("10.0.0.5", 40123))
    );
    assert_eq!(
        parse_driver_url("spark://CoarseGrainedScheduler@[fd00::5]:7078"),
        Some(("fd00::5", 7078))
    );
    assert_eq!(
        parse_driver_url("spark://CoarseGrainedScheduler@driver-svc.default.svc:7078"),
        Some(("driver-svc.default.svc", 7078))
    );
    for bad in [
        "",
        "spark://",
        "http://CoarseGrainedScheduler@h:1",
        "spark://CoarseGrainedScheduler@h",
        "spark://CoarseGrainedScheduler@h:",
        "spark://CoarseGrainedScheduler@:1",
        "spark://CoarseGrainedScheduler@h:+1",
        "spark://CoarseGrainedScheduler@h:65536",
    ] {
        assert_eq!(parse_driver_url(bad), None, "{bad}");
    }
    let link = DriverLink::from_executor_command(&words(STANDALONE_EXECUTOR), &[]).unwrap();
    assert_eq!(
        link,
        DriverLink {
            app_id: "app-20240101120000-0007".into(),
            host: "10.0.0.5".into(),
            port: 40123
        }
    );
    let link = DriverLink::from_executor_command(&words(K8S_EXECUTOR), &[]).unwrap();
    assert_eq!(
        (link.host.as_str(), link.port),
        ("spark-pi-3c4e6d8f-driver-svc.default.svc", 7078)
    );
    assert!(DriverLink::from_executor_command(&words(LOCAL_DRIVER), &[]).is_none());
}

/// From this machine: a JVM listening on 127.0.0.1:40123 and on all
/// addresses (IPv4-mapped) at 7078, an established connection, and the header.
const NET_TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9CBB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 812345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9CBB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 812399 1 0000000000000000 20 4 30 10 -1
   2: 0500000A:1B58 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 812400 1 0000000000000000 100 0 0 10 0
   3: broken line
";
const NET_TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1B9E 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 900001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 900002 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000500000A:1B59 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 900003 1 0000000000000000 100 0 0 10 0
";

#[test]
fn proc_net_tcp_listen_entries() {
    assert_eq!(
        parse_proc_net_tcp(NET_TCP),
        vec![
            ListeningSocket {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: 40123,
                inode: 812345
            },
            ListeningSocket {
                addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)),
                port: 7000,
                inode: 812400
            },
        ]
    );
    assert_eq!(
        parse_proc_net_tcp(NET_TCP6),
        vec![
            ListeningSocket {
                addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                port: 7070,
                inode: 900001
            },
            ListeningSocket {
                addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
                port: 8080,
                inode: 900002
            },
            ListeningSocket {
                addr: IpAddr::V6(Ipv4Addr::new(10, 0, 0, 5).to_ipv6_mapped()),
                port: 7001,
                inode: 900003
            },
        ]
    );
    assert!(parse_proc_net_tcp("").is_empty());
    assert!(parse_proc_net_tcp("0: XYZ:1 0:0 0A a b c d e 1").is_empty());
}

#[test]
fn matching_executors_to_driver_sockets() {
    let mut listening = parse_proc_net_tcp(NET_TCP);
    listening.extend(parse_proc_net_tcp(NET_TCP6));
    let link = |app: &str, host: &str, port: u16| DriverLink {
        app_id: app.into(),
        host: host.into(),
        port,
    };
    // Address and port match.
    assert_eq!(
        match_driver(&listening, &[link("app-1", "127.0.0.1", 40123)]),
        Some("app-1".into())
    );
    // Another address on the same port is another driver.
    assert_eq!(
        match_driver(&listening, &[link("app-1", "10.9.9.9", 40123)]),
        None
    );
    // A wildcard listener and a host name match on the port alone; an
    // IPv4-mapped listener matches its IPv4 address.
    assert_eq!(
        match_driver(&listening, &[link("app-2", "10.9.9.9", 7070)]),
        Some("app-2".into())
    );
    assert_eq!(
        match_driver(&listening, &[link("app-3", "driver.example.com", 8080)]),
        Some("app-3".into())
    );
    assert_eq!(
        match_driver(&listening, &[link("app-4", "10.0.0.5", 7001)]),
        Some("app-4".into())
    );
    // Several executors of one app agree; two apps are ambiguous.
    let same = [
        link("app-1", "127.0.0.1", 40123),
        link("app-1", "localhost", 40123),
        link("app-9", "127.0.0.1", 1),
    ];
    assert_eq!(match_driver(&listening, &same), Some("app-1".into()));
    let ambiguous = [
        link("app-1", "127.0.0.1", 40123),
        link("app-2", "127.0.0.1", 40123),
    ];
    assert_eq!(match_driver(&listening, &ambiguous), None);
    assert_eq!(match_driver(&listening, &[]), None);
}

#[test]
fn driver_app_id_from_a_real_listening_socket() {
    let me = std::process::id();
    let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
    let v4_port = v4.local_addr().unwrap().port();
    let sockets = listening_sockets(me).unwrap();
    assert!(
        sockets
            .iter()
            .any(|s| s.port == v4_port && s.addr == IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "{sockets:?}"
    );
    let link = |port: u16| DriverLink {
        app_id: "app-20240101120000-0001".into(),
        host: "127.0.0.1".into(),
        port,
    };
    assert_eq!(
        driver_app_id(me, &[link(v4_port)]),
        Some("app-20240101120000-0001".into())
    );
    // A port nobody in this process listens on.
    let other_port = if v4_port == 1 { 2 } else { v4_port - 1 };
    if !sockets.iter().any(|s| s.port == other_port) {
        assert_eq!(driver_app_id(me, &[link(other_port)]), None);
    }
    // IPv6, where the host has it.
    if let Ok(v6) = TcpListener::bind("[::1]:0") {
        let port = v6.local_addr().unwrap().port();
        let link = DriverLink {
            app_id: "app-v6".into(),
            host: "::1".into(),
            port,
        };
        assert_eq!(driver_app_id(me, &[link]), Some("app-v6".into()));
    }
    // The listener of another process does not count for us: PID 1 owns
    // none of our sockets.
    drop(v4);
    assert_eq!(driver_app_id(me, &[link(v4_port)]), None);
    assert_eq!(driver_app_id(u32::MAX - 1, &[link(v4_port)]), None);
}
