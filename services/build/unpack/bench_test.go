package unpack_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"testing"

	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// BenchmarkUnpackDigest measures the build stage's pass over a bundle:
// gunzip, untar, write each file and sha256 it. The archive holds 64 MiB of
// incompressible bytes in four shards (quantized weights compress
// poorly), packed the way arena submit packs (gzip BestSpeed).
func BenchmarkUnpackDigest(b *testing.B) {
	const shard, shards = 16 << 20, 4
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, shard)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for i := range shards {
		name := []string{"a", "b", "c", "d"}[i] + ".safetensors"
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: shard, Mode: 0o644}); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	archive := buf.Bytes()
	b.SetBytes(shard * shards)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		b.StartTimer()
		files, err := unpack.Unpack(bytes.NewReader(archive), dir, unpack.Limits{})
		if err != nil || len(files) != shards {
			b.Fatal(err, len(files))
		}
	}
}
