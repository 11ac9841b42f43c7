<?php
// sqlclients.php HOST PORT USER PASSWORD DATABASE
//
// Runs one fixed set of statements through mysqli and PDO (emulated and native prepares) and prints everything
// the server answered as JSON. sql_e2e_test.go runs it once through keyway and once straight to MariaDB and
// requires identical output, so nothing printed here may depend on the connection: no connection ids, no server
// version string, no times. Every section catches its own exception, so a failure shows up as a difference in
// that section, not as a missing report.

if ($argc != 6) {
    fwrite(STDERR, "usage: php sqlclients.php HOST PORT USER PASSWORD DATABASE\n");
    exit(2);
}
[, $host, $port, $user, $password, $db] = $argv;
$port = (int)$port;

$out = [];

// Run fn and record what it returns, or the exception it throws.
function section(array &$out, string $name, callable $fn): void
{
    try {
        $out[$name] = $fn();
    } catch (Throwable $e) {
        $out[$name] = ['exception' => get_class($e), 'code' => $e->getCode(), 'message' => $e->getMessage()];
    }
}

// Make a row JSON-safe: binary strings become hex.
function clean($v)
{
    if (is_array($v)) {
        return array_map('clean', $v);
    }
    if (is_string($v) && preg_match('//u', $v) !== 1) {
        return ['hex' => bin2hex($v)];
    }
    if (is_float($v)) {
        return ['float' => sprintf('%.17g', $v)];
    }
    return $v;
}

function fields(mysqli_result $r): array
{
    $f = [];
    foreach ($r->fetch_fields() as $field) {
        $f[] = [$field->name, $field->orgname, $field->table, $field->orgtable, $field->db, $field->type,
            $field->flags, $field->decimals, $field->length, $field->charsetnr];
    }
    return $f;
}

mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);

section($out, 'mysqli', function () use ($host, $port, $user, $password, $db) {
    $r = [];
    $m = new mysqli($host, $user, $password, $db, $port);
    $m->set_charset('utf8mb4');
    $m->query('DROP TABLE IF EXISTS kw_php');
    $m->query('CREATE TABLE kw_php (
        id INT AUTO_INCREMENT PRIMARY KEY,
        name VARCHAR(50) NULL,
        d DATE NULL,
        dt DATETIME(3) NULL,
        t TIME NULL,
        amount DECIMAL(12,4) NULL,
        f DOUBLE NULL,
        big BIGINT UNSIGNED NULL,
        data BLOB NULL,
        flag TINYINT(1) NOT NULL DEFAULT 0
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4');
    $m->query("INSERT INTO kw_php (name, d, dt, t, amount, f, big, data) VALUES
        ('alpha', '2024-02-29', '2024-02-29 23:59:59.125', '-838:59:59', 12345678.1234, 1.5, 18446744073709551615, X'00FF00FE'),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
        ('ünïcødé ✓', '1970-01-01', '1999-12-31 00:00:00.000', '00:00:01', -0.0001, -2.5e-300, 0, '')");
    $r['insert'] = [$m->affected_rows, $m->insert_id, $m->info, $m->warning_count];

    $res = $m->query('SELECT * FROM kw_php ORDER BY id');
    $r['select_fields'] = fields($res);
    $r['select_rows'] = clean($res->fetch_all(MYSQLI_ASSOC));
    $r['select_num_rows'] = $res->num_rows;

    $res = $m->query('SELECT NULL AS n, 1 + 1 AS two, 0.1 + 0.2 AS dec_sum, CAST(1 AS DOUBLE) / 3 AS third, \'\' AS empty, REPEAT(\'x\', 70000) AS long_text');
    $row = $res->fetch_assoc();
    $row['long_text'] = md5($row['long_text']);
    $r['expressions'] = clean($row);

    $m->query("UPDATE kw_php SET flag = 1 WHERE name IS NOT NULL");
    $r['update'] = [$m->affected_rows, $m->info];

    // Prepared statements (binary protocol): parameters, NULLs, long data.
    $st = $m->prepare('SELECT id, name, d, dt, t, amount, f, big, data FROM kw_php WHERE id >= ? AND (name <> ? OR name IS NULL) ORDER BY id');
    $id = 1;
    $name = 'nobody';
    $st->bind_param('is', $id, $name);
    $st->execute();
    $res = $st->get_result();
    $r['prepared_fields'] = fields($res);
    $r['prepared_rows'] = clean($res->fetch_all(MYSQLI_NUM));
    $r['prepared_param_count'] = $st->param_count;
    $st->close();

    $st = $m->prepare('INSERT INTO kw_php (name, amount, data) VALUES (?, ?, ?)');
    $n = 'prepared';
    $amount = '42.4200';
    $blob = null;
    $st->bind_param('sdb', $n, $amount, $blob);
    $st->send_long_data(2, str_repeat("\x00\x01binary", 1000));
    $st->send_long_data(2, 'tail');
    $st->execute();
    $r['prepared_insert'] = [$st->affected_rows, $st->insert_id];
    $st->close();
    $res = $m->query("SELECT LENGTH(data), MD5(data), amount FROM kw_php WHERE name = 'prepared'");
    $r['long_data'] = $res->fetch_row();

    // Re-executing a statement with new parameters.
    $st = $m->prepare('SELECT ? + 1, ?');
    $a = 0;
    $b = null;
    $st->bind_param('is', $a, $b);
    $runs = [];
    foreach ([1, 42, -8] as $a) {
        $b = $a % 2 ? null : "even $a";
        $st->execute();
        $runs[] = $st->get_result()->fetch_row();
    }
    $r['reexecute'] = $runs;
    $st->close();

    // A read-only cursor: rows come by COM_STMT_FETCH.
    $st = $m->prepare('SELECT seq, CONCAT(\'row \', seq) FROM seq_1_to_7 WHERE seq > ?');
    $st->attr_set(MYSQLI_STMT_ATTR_CURSOR_TYPE, MYSQLI_CURSOR_TYPE_READ_ONLY);
    $min = 2;
    $st->bind_param('i', $min);
    $st->execute();
    $st->bind_result($seq, $label);
    $rows = [];
    while ($st->fetch()) {
        $rows[] = [$seq, $label];
    }
    $r['cursor'] = $rows;
    $st->close();

    // A transaction rolled back, then one committed.
    $m->begin_transaction();
    $m->query("INSERT INTO kw_php (name) VALUES ('rolled back')");
    $r['in_tx_count'] = $m->query('SELECT COUNT(*) FROM kw_php')->fetch_row();
    $m->rollback();
    $r['after_rollback_count'] = $m->query('SELECT COUNT(*) FROM kw_php')->fetch_row();
    $m->begin_transaction();
    $m->query("INSERT INTO kw_php (name) VALUES ('committed')");
    $m->commit();
    $r['after_commit_count'] = $m->query('SELECT COUNT(*) FROM kw_php')->fetch_row();

    // Multi-statements and multi-results.
    $m->multi_query("SELECT 1 AS a; SELECT 'x' AS b, NULL AS c; UPDATE kw_php SET flag = 2 WHERE id = 1; SELECT id, name FROM kw_php WHERE id <= 2 ORDER BY id; DO 1");
    $results = [];
    do {
        if ($res = $m->store_result()) {
            $results[] = ['rows' => clean($res->fetch_all(MYSQLI_ASSOC))];
            $res->free();
        } else {
            $results[] = ['affected_rows' => $m->affected_rows];
        }
    } while ($m->more_results() && $m->next_result());
    $r['multi_results'] = $results;

    // An error in the middle of a multi-statement stops it there.
    try {
        $m->multi_query('SELECT 1; SELEKT 2; SELECT 3');
        $results = [];
        do {
            if ($res = $m->store_result()) {
                $results[] = $res->fetch_all();
            }
        } while ($m->more_results() && $m->next_result());
        $r['multi_error'] = $results;
    } catch (mysqli_sql_exception $e) {
        $r['multi_error'] = [$e->getCode(), $e->getSqlState(), $e->getMessage()];
    }

    // Errors leave the connection usable.
    try {
        $m->query('SELECT * FROM no_such_table');
    } catch (mysqli_sql_exception $e) {
        $r['error'] = [$e->getCode(), $e->getSqlState(), $e->getMessage()];
    }
    try {
        $m->query("INSERT INTO kw_php (id) VALUES (1)");
    } catch (mysqli_sql_exception $e) {
        $r['duplicate'] = [$e->getCode(), $e->getSqlState(), $e->getMessage()];
    }
    $r['after_error'] = $m->query('SELECT 1')->fetch_row();

    // Session state: user variables, USE, SET.
    $m->query('SET @kw := 7, SESSION sql_mode = \'ANSI_QUOTES\'');
    $r['session'] = $m->query('SELECT @kw * 6, @@SESSION.sql_mode')->fetch_row();
    $m->select_db('mysql');
    $r['select_db'] = $m->query('SELECT DATABASE()')->fetch_row();
    $m->select_db($db);
    $r['ping'] = $m->ping();

    // A larger result, checked by digest.
    $res = $m->query('SELECT seq, REPEAT(CHAR(65 + seq % 26), seq % 300) FROM seq_1_to_20000', MYSQLI_USE_RESULT);
    $h = hash_init('sha256');
    $count = 0;
    while ($row = $res->fetch_row()) {
        hash_update($h, implode("\t", $row) . "\n");
        $count++;
    }
    $res->free();
    $r['large'] = [$count, hash_final($h)];
    $m->close();
    return $r;
});

foreach (['pdo_emulated' => true, 'pdo_native' => false] as $name => $emulate) {
    section($out, $name, function () use ($host, $port, $user, $password, $db, $emulate) {
        $r = [];
        $pdo = new PDO("mysql:host=$host;port=$port;dbname=$db;charset=utf8mb4", $user, $password, [
            PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
            PDO::ATTR_EMULATE_PREPARES => $emulate,
            PDO::ATTR_STRINGIFY_FETCHES => false,
        ]);
        $st = $pdo->prepare('SELECT id, name, d, dt, amount, f, big, data, flag FROM kw_php WHERE id > :min AND (name IS NULL OR name <> :name) ORDER BY id LIMIT :lim');
        $st->bindValue(':min', 0, PDO::PARAM_INT);
        $st->bindValue(':name', 'nobody');
        $st->bindValue(':lim', 10, PDO::PARAM_INT);
        $st->execute();
        $meta = [];
        for ($i = 0; $i < $st->columnCount(); $i++) {
            $c = $st->getColumnMeta($i);
            $meta[] = [$c['name'], $c['native_type'] ?? null, $c['len'], $c['precision'], $c['pdo_type']];
        }
        $r['meta'] = $meta;
        $r['rows'] = clean($st->fetchAll(PDO::FETCH_ASSOC));

        $st = $pdo->prepare('SELECT ?, ?, ?, ?');
        $st->execute([1, 'two', null, '3.5']);
        $r['positional'] = clean($st->fetch(PDO::FETCH_NUM));
        $st->closeCursor();

        $ins = $pdo->prepare('INSERT INTO kw_php (name, d, amount) VALUES (?, ?, ?)');
        $ins->execute(['pdo ' . ($emulate ? 'emulated' : 'native'), '2000-01-01', '1.5']);
        $r['insert'] = [$ins->rowCount()];

        $pdo->beginTransaction();
        $pdo->exec("DELETE FROM kw_php");
        $r['in_tx'] = $pdo->query('SELECT COUNT(*) FROM kw_php')->fetchColumn();
        $pdo->rollBack();
        $r['after_rollback'] = $pdo->query('SELECT COUNT(*) FROM kw_php')->fetchColumn();

        try {
            $pdo->query('SELECT nope FROM kw_php');
        } catch (PDOException $e) {
            $r['error'] = [$e->getCode(), $e->errorInfo];
        }
        $r['after_error'] = $pdo->query('SELECT 1')->fetchColumn();

        if ($emulate) {
            // Emulated prepares send text; several statements give several rowsets.
            $multi = $pdo->query('SELECT 1 AS a; SELECT 2 AS b, 3 AS c; SELECT NULL AS n');
            $sets = [];
            do {
                $sets[] = $multi->fetchAll(PDO::FETCH_ASSOC);
            } while ($multi->nextRowset());
            $r['rowsets'] = $sets;
        }
        return $r;
    });
}

echo json_encode($out, JSON_PRETTY_PRINT | JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION), "\n";
