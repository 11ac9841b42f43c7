<?php
// Drives a keyway container with php-memcached over the text or binary
// protocol: php containers.php HOST PORT text|binary PREFIX [SQLDOOR DIRECT]
// Prints one JSON object of what each call returned, and with the two
// HOST:PORT arguments the rows read back through each.
[$_, $host, $port, $proto, $prefix] = $argv;
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, $proto === 'binary');
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->addServer($host, (int)$port);
$k = fn($s) => "@@aaa.$prefix$s";
$out = [];
$out['set'] = $m->set($k('a'), 'hello');
$out['get'] = $m->get($k('a'));
$out['set_n'] = $m->set($k('n'), '10');
$out['incr'] = $m->increment($k('n'), 5);
$out['decr'] = $m->decrement($k('n'), 20);
$r = $m->get($k('a'), null, Memcached::GET_EXTENDED);
$out['cas_ok'] = $m->cas($r['cas'], $k('a'), 'changed');
$out['cas_stale'] = $m->cas($r['cas'], $k('a'), 'lost');
$out['cas_stale_code'] = $m->getResultCode() === Memcached::RES_DATA_EXISTS;
$out['after_cas'] = $m->get($k('a'));
$out['add_existing'] = $m->add($k('a'), 'x');
$out['set_d'] = $m->set($k('d'), 'gone soon');
$out['delete'] = $m->delete($k('d'));
$out['get_deleted'] = $m->get($k('d'));
$out['get_deleted_notfound'] = $m->getResultCode() === Memcached::RES_NOTFOUND;
// The same rows through keyway's SQL door and direct to MariaDB (optional
// HOST:PORT arguments, user app/secret).
foreach (['sql_keyway' => $argv[5] ?? null, 'sql_direct' => $argv[6] ?? null] as $name => $addr) {
    if ($addr === null) {
        continue;
    }
    [$h, $p] = explode(':', $addr);
    $pdo = new PDO("mysql:host=$h;port=$p;dbname=test", 'app', 'secret', [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
    $st = $pdo->prepare('SELECT c1, c2 FROM demo_test WHERE c1 LIKE ? ORDER BY c1');
    $st->execute(["$prefix%"]);
    $out[$name] = $st->fetchAll(PDO::FETCH_KEY_PAIR);
}
echo json_encode($out), "\n";
